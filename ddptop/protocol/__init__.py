"""What ddptop and its benchmark kernels share, standard library only.

The kernels (``bench_kernels``) import nothing of ddptop but this package: the event format, the launch
spec a rank is started with, the run directory's names, the vocabularies both sides write, and the
workload protocol a user's own model is measured through (``workload``).
"""

__all__ = ["affinity", "bandwidth", "catalog", "comm_hooks", "config_fields", "devices", "json_file", "jsontypes", "kernel_files",
           "launchspec", "layout", "loader_target", "marks", "modelspec", "precision", "storage", "strategies",
           "variants", "vocab", "wire", "workload"]
