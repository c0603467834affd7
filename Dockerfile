# The HarnessOps application image (web, workers). vLLM runs from its own image (see docker-compose.yml).
# The build context is the whole project; .dockerignore keeps out what is local to a checkout
# (virtualenv, databases, caches, node_modules), so a new package is in the image without editing this file
# (tests/test_deploy.py fails if one is left out).

# Front-end packages from npm, exactly as package-lock.json pins them, and the code editor bundled from them.
FROM node:20.20.2-bookworm-slim AS frontend
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY console/frontend console/frontend
RUN npm run build && npm prune --omit=dev

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HARNESSOPS_MODE=production WEB_CONCURRENCY=2
WORKDIR /app
COPY . .
COPY --from=frontend /app/node_modules node_modules
COPY --from=frontend /app/static_build static_build
# The GPU worker's image adds the training extra (TRL, accelerate, peft; torch from PyPI is the CUDA build):
# docker-compose.yml builds it with EXTRAS=[train].
ARG EXTRAS=""
RUN pip install --no-cache-dir -e ".${EXTRAS}" \
 && DJANGO_SECRET_KEY=build DJANGO_ALLOWED_HOSTS=build DATABASE_URL=sqlite:////tmp/build.db \
    REDIS_URL=redis://build:6379/0 DJANGO_STATIC_ROOT=/app/staticfiles python manage.py collectstatic --noinput
EXPOSE 8000
CMD ["uvicorn", "console.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--loop", "uvloop", "--http", "httptools", "--ws", "websockets", "--no-access-log"]
