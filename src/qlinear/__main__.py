"""``python -m qlinear ...`` runs the ``qlinear`` command."""


from qlinear.cli.main import run

if __name__ == "__main__":
    run()
