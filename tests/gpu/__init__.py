"""The GPU suite (tests marked ``gpu``): ``python3 -m pytest -m gpu -n 0`` on a node with NVIDIA GPUs;
skipped, each test with the reason, anywhere else. docs/testing.md says what each test checks and how long it
takes."""
