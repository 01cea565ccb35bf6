from ncuflow.cli import run

run()
