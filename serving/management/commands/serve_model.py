import dataclasses
import os
import shlex
import shutil
import sys

from django.core.management.base import BaseCommand, CommandError

from serving.vllm import PROFILES

GPU_EXTRA_HINT = "vLLM is a GPU-only extra: pip install 'harnessops[gpu]' on the GPU host"
LOCAL_PORT = 8001


class Command(BaseCommand):
    help = ("Serve the model behind the OpenAI-compatible API: vLLM with a named profile, or --local for "
            "the offline SmolLM2 stand-in on CPU.")

    def add_arguments(self, parser):
        parser.add_argument("--profile", choices=sorted(PROFILES), default="qwen3-8b")
        parser.add_argument("--local", action="store_true",
                            help="serve the offline local model with serving.openai_compat instead of vLLM")
        parser.add_argument("--host", help="default: the profile's (vLLM) or 127.0.0.1 (--local)")
        parser.add_argument("--port", type=int, help=f"default: the profile's (vLLM) or {LOCAL_PORT} (--local)")
        parser.add_argument("--print", action="store_true", help="print the command line instead of running it")

    def handle(self, *, profile, local, host, port, print, **options):
        if local:
            argv = [sys.executable, "-m", "serving.openai_compat", "--backend", "local",
                    "--host", host or "127.0.0.1", "--port", str(port or LOCAL_PORT)]
        else:
            chosen = PROFILES[profile]
            chosen = dataclasses.replace(chosen, host=host or chosen.host, port=port or chosen.port)
            argv = chosen.to_argv()
        if print:
            self.stdout.write(shlex.join(argv))
            return
        if not local:
            executable = shutil.which(argv[0])
            if executable is None:
                raise CommandError(f"`{argv[0]}` is not installed here. {GPU_EXTRA_HINT}.")
            argv[0] = executable
        sys.stdout.flush()
        os.execvp(argv[0], argv)
