"""The finding room: what a run means, decided once, for every command (see `judgement`)."""
