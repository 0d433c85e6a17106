# tests/gpu: the GPU suite (needs a CUDA GPU and a CUDA build of flashsdpa._C; skipped otherwise).
# A package so that its module names (gpu.test_sdpa, ...) never collide with tests/test_*.py, and
# so that pytest puts tests/ on sys.path, where the shared helpers.py lives.
