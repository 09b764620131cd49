def add(a, b):
    # TODO: implement
    return 0


def mul(a, b):
    return a * b
