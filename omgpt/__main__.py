from omgpt.commands.cli import main

main()
