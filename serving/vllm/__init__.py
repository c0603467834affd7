"""vLLM launch profiles and health checks for the production model server (pure: no Django)."""

from serving.vllm.health import check_health
from serving.vllm.profile import PROFILES, VllmProfile

__all__ = ["PROFILES", "VllmProfile", "check_health"]
