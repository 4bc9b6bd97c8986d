from omgpt.cli import main

main()
