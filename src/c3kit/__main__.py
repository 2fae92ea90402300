"""python -m c3kit"""

from c3kit.cli.main import run

run()
