"""``probe-tui config-check``: placeholder while being written."""


def add_parser(sub) -> None:
    sub.add_parser("config-check")


def cmd_config_check(args) -> int:
    return 2
