"""No GPU in the test double."""


def is_available():
    return False


def is_initialized():
    return False
