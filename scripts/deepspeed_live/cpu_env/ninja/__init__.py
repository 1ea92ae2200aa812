"""Stands for the `ninja` Python package on a machine that has only Debian's ninja-build.

DeepSpeed's just-in-time op builder imports `ninja` only to learn whether ninja is there;
PyTorch's extension builder then runs the `ninja` program itself, which ninja-build provides.
"""
