from ncuflow.cli import main

main()
