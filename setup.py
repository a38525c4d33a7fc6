"""The one build step pyproject.toml cannot say: the default routes.yaml ships inside zest.

It lives at the repository's root, where `make serve` serves it and `zest check routes.yaml`
reads it, and no package folder holds it, so package-data cannot name it. This build_py copies
it into the built zest package (a wheel's zest/routes.yaml), where `zest init` and a command run
without a routes file find it (gateway/cli/_init.py), and puts it in the sdist a wheel may be
built from. An editable install copies nothing: it reads the repository's own file.
Everything else is declared in pyproject.toml.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROUTES = "routes.yaml"


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            self.copy_file(ROUTES, str(Path(self.build_lib, "zest", ROUTES)))

    def get_source_files(self) -> list[str]:
        return [*super().get_source_files(), ROUTES]


setup(cmdclass={"build_py": BuildPy})
