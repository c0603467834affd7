# The HarnessOps application image (web, workers). vLLM runs from its own image (see docker-compose.yml).
# The build context is the whole project; .dockerignore keeps out what is local to a checkout
# (virtualenv, databases, caches), so a new package is in the image without editing this file
# (tests/test_deploy.py fails if one is left out).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HARNESSOPS_MODE=production
WORKDIR /app
COPY . .
# The GPU worker's image adds the training extra (TRL, accelerate, peft; torch from PyPI is the CUDA build):
# docker-compose.yml builds it with EXTRAS=[train].
ARG EXTRAS=""
RUN pip install --no-cache-dir -e ".${EXTRAS}" \
 && DJANGO_SECRET_KEY=build DJANGO_ALLOWED_HOSTS=build DATABASE_URL=sqlite:////tmp/build.db \
    REDIS_URL=redis://build:6379/0 DJANGO_STATIC_ROOT=/app/staticfiles python manage.py collectstatic --noinput
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "console.asgi:application"]
