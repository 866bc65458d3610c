"""`python -m wmrl_cli` (and `accelerate launch -m wmrl_cli ...`)."""

from wmrl_cli.cli.app import main

if __name__ == "__main__":
    main()
