"""A user module whose NAME() never returns: `minimize --module --budget` must still end."""

import time


def make_case():
    while True:
        time.sleep(1)
