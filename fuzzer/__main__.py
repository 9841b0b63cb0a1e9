"""`python -m fuzzer` is `divfuzz`."""

from fuzzer.cli import main

main()
