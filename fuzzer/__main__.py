"""`python -m divfuzz.fuzzer` is `divfuzz`."""

from divfuzz.fuzzer.cli.main import main

main()
