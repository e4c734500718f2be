"""Build hook: the seed check's report (book/_claims_report.json, written by `make claims`)
goes into the wheel as package data, so `ab.glue` and `ab.claim_report` work where only the
package is installed (Colab). In a clone the package reads book/ directly."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

REPORT = Path(__file__).resolve().parent / "book" / "_claims_report.json"


class BuildWithReport(build_py):
    def run(self):
        super().run()
        if REPORT.is_file():
            target = Path(self.build_lib) / "attention_book" / "book" / "claims_report.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            self.copy_file(str(REPORT), str(target))


setup(cmdclass={"build_py": BuildWithReport})
