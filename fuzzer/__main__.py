"""`python -m fuzzer` is `divfuzz`."""

from fuzzer.cli.main import main

main()
