# Two commands on a fresh machine:
#   make book   build the website (every notebook executed) -> _build/html/index.html
#   make test   run every test: package, notebooks (nbmake), site build, browser
# Both create .venv at the repository root on first use and reuse it afterwards.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The tested environment: every package pinned with its hashes (`make lock` writes it from
# pyproject.toml's extras; see README "The locked environment"). `make venv` installs exactly this.
# On another platform (the lock is for CPython 3.11 on Linux x86-64) `make venv LOCK=` installs
# from pyproject.toml's lower bounds instead, torch as TORCH_SPEC says.
LOCK ?= requirements.lock
TORCH_SPEC ?= torch==2.13.0
# d2l, the reference of tests/test_d2l_parity.py (locked on its own, installed without its deps).
D2L_SPEC := "d2l==1.0.3"
# The lock's torch is the CPU build, from PyTorch's CPU index (never a CUDA build on a CPU runner).
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# Not under _build/: nbmake skips every path with a "_build" part, and would find no notebooks.
STAGE := _stage
STAMP := $(VENV)/.stamp-$(shell cat pyproject.toml requirements.txt $(LOCK) 2>/dev/null | sha1sum | cut -c1-12)
JOBS ?= 2
# With JOBS test processes on a 2-core machine, each torch process gets one intra-op thread:
# several processes each spinning several threads slow one another down many times over.
PAR_ENV := OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1}
# Notebooks executed for the website draw every explorer's settings into a kernel-free player
# (src/attention_book/book/explorer.py) and record what they drew in $(FRAMES) for the build log
# and the browser test.
FRAMES := $(STAGE)/_frames
# Live views (src/attention_book/book/live.py) export their models and data into $(LIVE), which
# scripts/stage.py keeps between stagings and _config.yml lists in html_static_path: the files land
# in _static/live/models/ of the site, beside book/_static/live/*.mjs.
LIVE := $(STAGE)/_live/live/models
# Quoted: the clone may live in a path with a space.
SITE_ENV := ATTENTION_BOOK_EXPLORERS=static ATTENTION_BOOK_FRAMES="$(CURDIR)/$(FRAMES)" ATTENTION_BOOK_LIVE="$(CURDIR)/$(LIVE)"
# nbmake runs JOBS notebooks at a time (pytest-xdist), one torch thread each. kernel_poll
# (book/_ext/kernel_poll.py) starts kernels on IPC transport, so two kernels starting together
# cannot take the same TCP port (jupyter_client#487, which once hung a parallel run here), keeps
# a missed socket wake-up after widget cells from stalling a notebook, and ends the run with a
# table of notebook times (also written to the --notebook-times file; the next run starts the
# longest notebooks first).
NOTEBOOK_RUN = PYTHONPATH=book/_ext $(PAR_ENV) $(PY) -m pytest -p kernel_poll --nbmake -n $(JOBS) -p no:randomly
NB_TIMES := $(STAGE)/_notebook_times.json

.PHONY: venv lock publish repository book test test-unit test-notebooks test-site test-smoke lab stage clean student grade gradescope-bundle claims gpu-report cpu-report times

venv: $(STAMP)

$(STAMP):
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
ifneq ($(LOCK),)
	@# torch first, alone, from the CPU index: the lock's other packages come from PyPI.
	@# Every line of the lock carries its hashes; --no-deps: the lock lists every dependency.
	sed -n '/^torch==/,/[^\\]$$/p' $(LOCK) > $(VENV)/torch.lock
	$(PY) -m pip install --quiet --no-deps --require-hashes --extra-index-url $(TORCH_INDEX) -r $(VENV)/torch.lock
	$(PY) -m pip install --quiet --no-deps --require-hashes -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
else
	@# torch first and on its own, so no other requirement pulls a different build.
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev,lab,parity]"
	@# d2l, the reference of tests/test_d2l_parity.py, without its pinned (stale) dependencies
	@# and torchvision: the parity extra above brings what it imports.
	$(PY) -m pip install --quiet --no-deps $(D2L_SPEC)
endif
	@# Inline figures in every kernel, even when the caller exports MPLBACKEND=Agg (as CI does):
	@# the site shows what the kernel drew.
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (attention_book)" \
		--env MPLBACKEND module://matplotlib_inline.backend_inline >/dev/null
	@rm -f $(VENV)/.stamp-*
	@touch $@

## Refresh the lock from pyproject.toml's extras (dev, lab, parity) with uv, hashes included:
## versions already in the lock are kept unless LOCK_ARGS=--upgrade (or --upgrade-package NAME).
## d2l (tests/test_d2l_parity.py) is locked on its own, without its stale pinned dependencies,
## which is why `make venv` installs the lock with --no-deps. Where pip finds wheels on local
## disk (PIP_FIND_LINKS), uv looks there too; elsewhere torch comes from PyTorch's CPU index.
UV_VERSION := 0.13.9
LOCK_ARGS ?=
LOCK_SOURCES := $(if $(PIP_FIND_LINKS),--find-links $(PIP_FIND_LINKS),--torch-backend cpu)
LOCK_TARGET := --python-version 3.11.7 --python-platform x86_64-manylinux_2_28
lock: venv
	$(PY) -m pip install --quiet "uv==$(UV_VERSION)"
	@# uv keeps the versions of the file it writes: start from the current lock.
	$(if $(wildcard $(LOCK)),cp $(LOCK) $(LOCK).tmp)
	$(VENV)/bin/uv pip compile pyproject.toml --extra dev --extra lab --extra parity --generate-hashes \
		--no-header $(LOCK_TARGET) $(LOCK_SOURCES) $(LOCK_ARGS) -o $(LOCK).tmp
	echo $(D2L_SPEC) | $(VENV)/bin/uv pip compile - --no-deps --generate-hashes --no-header \
		$(LOCK_TARGET) -o $(LOCK).d2l
	{ echo "# The tested environment. \`make lock\` writes this file from pyproject.toml (uv pip compile);"; \
	  echo "# \`make venv\`, CI and the deploy install it with --no-deps --require-hashes."; \
	  echo "# For CPython 3.11 on Linux x86-64; torch is PyTorch's CPU build."; \
	  cat $(LOCK).tmp $(LOCK).d2l; } > $(LOCK)
	rm -f $(LOCK).tmp $(LOCK).d2l
	@# The next make (any target) reinstalls .venv from the new lock, so the tests run on it.
	rm -f $(VENV)/.stamp-*

## Copy the book's sources into $(STAGE): notebooks are executed there, never in place.
stage: venv
	$(PY) scripts/stage.py $(STAGE)

## Notebooks run by nbmake, JOBS at a time, before the site build; a notebook already executed
## from the same source and package (marked by scripts/stage.py) is not run again. Staging
## again afterwards marks the executed ones, so the build reuses their outputs. (Staged here,
## not as a prerequisite: after test-notebooks, this staging marks what it executed.)
book: venv
	$(PY) scripts/stage.py $(STAGE)
	$(SITE_ENV) $(NOTEBOOK_RUN) --overwrite --nbmake-timeout=600 --skip-executed --notebook-times $(NB_TIMES) $(STAGE)/notebooks
	$(PY) scripts/stage.py $(STAGE)
	$(SITE_ENV) $(VENV)/bin/jupyter-book build $(STAGE) --path-output . -W --keep-going
	$(PY) scripts/explorers.py $(FRAMES)
	@$(PY) scripts/timings.py --summary $(NB_TIMES)
	@echo "Website: _build/html/index.html"

## The website at the full size, as GitHub Pages publishes it (.github/workflows/book.yml):
## every notebook at ATTENTION_BOOK_SIZE=full, on the GPU when torch sees one, else the CPU.
## $(PUBLISH_STAGE) is the execution cache, kept between runs (the workflow caches it): a
## notebook is executed again only when its source, the package (src/, pyproject.toml) or the
## size changed (scripts/stage.py's key), so a second publish with nothing changed executes
## nothing and a changed chapter re-executes that chapter only. Site: $(PUBLISH_OUT)/_build/html.
PUBLISH_STAGE := _stage_publish
PUBLISH_OUT := _build/publish
PUBLISH_SIZE ?= full
PUBLISH_TIMEOUT ?= 7200
PUBLISH_ENV := ATTENTION_BOOK_SIZE=$(PUBLISH_SIZE) ATTENTION_BOOK_EXPLORERS=static \
	ATTENTION_BOOK_FRAMES="$(CURDIR)/$(PUBLISH_STAGE)/_frames" ATTENTION_BOOK_LIVE="$(CURDIR)/$(PUBLISH_STAGE)/_live/live/models"
publish: venv
	$(PUBLISH_ENV) $(PY) scripts/stage.py $(PUBLISH_STAGE)
	$(PUBLISH_ENV) $(NOTEBOOK_RUN) --overwrite --nbmake-timeout=$(PUBLISH_TIMEOUT) --skip-executed \
		--notebook-times $(PUBLISH_STAGE)/_notebook_times.json $(PUBLISH_STAGE)/notebooks
	$(PUBLISH_ENV) $(PY) scripts/stage.py $(PUBLISH_STAGE)
	$(PUBLISH_ENV) $(VENV)/bin/jupyter-book build $(PUBLISH_STAGE) --path-output $(PUBLISH_OUT) -W --keep-going
	@echo "Website (full size): $(PUBLISH_OUT)/_build/html/index.html"

## A fork's first step (README "Publishing your fork"): after editing repository.url (and .branch)
## in _config.yml, point the notebooks' Colab install cells, CONTRIBUTING.md's setup cell and
## ab.show_source's links at it.
repository: venv
	$(PY) scripts/set_repository.py

## The grader's test (tests/test_grade.py) grades hostile submissions: only inside its sandbox.
## --durations=30: the log ends with the 30 slowest tests (setup, call and teardown apart).
## -p tests.xdist_group_ids: tests of one xdist_group share a worker under pytest 9.2 (without it
## the graded class, a 220 s session fixture, was built on both workers; tests/xdist_group_ids.py).
GROUPED_RUN = $(PAR_ENV) $(PY) -m pytest -p tests.xdist_group_ids -n $(JOBS) --dist loadgroup --durations=30
test-unit: venv
	bash scripts/ensure_debian_package.sh bubblewrap /usr/bin/bwrap "the grader's sandbox"
	bash scripts/ensure_actionlint.sh $(VENV)
	$(GROUPED_RUN) -m "not notebooks and not browser" tests

## Execute every staged notebook once with nbmake (JOBS at a time), writing outputs into the
## staged copy, so the site build (`book`) reuses them instead of executing again.
## On a fresh clone (no $(NB_TIMES) yet) the committed times of an earlier run order the
## notebooks longest first: replaying the last CI run's times through xdist's scheduler, that
## finishes the 20 notebooks in about 862 s instead of the alphabetical order's 938 s.
test-notebooks: stage
	$(SITE_ENV) $(NOTEBOOK_RUN) --overwrite --nbmake-timeout=600 --notebook-times $(NB_TIMES) \
		--notebook-times-default book/_ext/notebook_times_ci.json $(STAGE)/notebooks

## The site from the executed notebooks, then the browser check (tests/test_site.py:
## Debian's Chromium, installed here by scripts/ensure_debian_package.sh if missing and root).
## JOBS browser tests at a time: a test mostly waits for Chromium to load and lay out a page,
## so two processes check about twice the pages per minute of one on two cores (measured:
## 120 against 61 tests in the same 400 s on this 2-core machine, issue 39).
test-site: test-notebooks book
	bash scripts/ensure_debian_package.sh chromium /usr/bin/chromium "the browser test"
	$(GROUPED_RUN) -m "browser" tests

## The full-size smoke run: every notebook at ATTENTION_BOOK_SIZE=full on the CPU, every training run
## capped at SMOKE_STEPS optimisation steps (ATTENTION_BOOK_MAX_STEPS), explorers live (drawn once).
## It shows that each full-size configuration builds, runs forward and backward and fits in memory
## before a GPU reader meets it; its numbers mean nothing. Its own staged copy, never published.
## ATTENTION_BOOK_DATA is dropped: the offline copies hold only the ci size's sentence pairs, so the
## run uses the downloaded data, or offline the generated stand-ins (large enough for any size).
## SMOKE_SAME_AS_CI: notebooks whose full size is their ci size (no size setting, no explorer, no
## data; tests/test_smoke_skip.py keeps the list honest). test-notebooks already executes exactly
## that configuration, every training run to its end, so the smoke run skips them and says so.
SMOKE_STAGE := _stage_smoke
SMOKE_STEPS ?= 2
SMOKE_SAME_AS_CI := ch03_exercises ch05_exercises
test-smoke: venv
	$(PY) scripts/stage.py $(SMOKE_STAGE)
	@echo "test-smoke skips $(SMOKE_SAME_AS_CI): their full size is their ci size, which test-notebooks executes in full"
	env -u ATTENTION_BOOK_DATA ATTENTION_BOOK_SIZE=full ATTENTION_BOOK_MAX_STEPS=$(SMOKE_STEPS) ATTENTION_BOOK_EXPLORERS=live \
		$(NOTEBOOK_RUN) --nbmake-timeout=600 --notebook-times $(SMOKE_STAGE)/_notebook_times.json \
		--notebook-times-default book/_ext/notebook_times_smoke.json \
		$(foreach n,$(SMOKE_SAME_AS_CI),--ignore=$(SMOKE_STAGE)/notebooks/$(n).ipynb) $(SMOKE_STAGE)/notebooks

test: test-unit test-site test-smoke
	@$(PY) scripts/timings.py --summary $(NB_TIMES) $(SMOKE_STAGE)/_notebook_times.json

## The notebook times of the last runs; `make times TIMINGS_ARGS="--write --make-test-seconds N"`
## records them (with this machine's processor and the date) for book/_timings.md.
TIMINGS_ARGS ?=
times: venv
	$(PY) scripts/timings.py $(TIMINGS_ARGS) $(NB_TIMES) $(SMOKE_STAGE)/_notebook_times.json

## Every chapter at full size on a CUDA GPU, one notebook per piece (each under 10 minutes):
## wall time, peak GPU memory, the claims' values, precision, GPU, torch -> book/_gpu_report.md.
## GPU_NOTEBOOKS="ch05 ch07" runs some. GPU_PYTHON: the Python whose torch sees the GPU, by default
## .venv's when it exists (make venv), else python3, e.g. a GPU machine's own PyTorch; into that one,
## `pip install -e ".[dev]"` adds the rest and keeps its torch. Without CUDA it stops with one line.
GPU_PYTHON ?= $(if $(wildcard $(PY)),$(PY),$(PYTHON))
GPU_NOTEBOOKS ?=
gpu-report:
	$(GPU_PYTHON) scripts/gpu_report.py $(GPU_NOTEBOOKS)

## Every chapter at full size on this machine's CPU, as `make publish` executes it there, each notebook
## stopped after CPU_TIMEOUT seconds: wall time, torch's threads, the cells that took the time (where a
## notebook was stopped, the cell it was in and its last printed line), the claims
## -> book/_cpu_report.md, shown on the timings page with the processor named.
CPU_TIMEOUT ?= 300
cpu-report: venv
	$(PY) scripts/gpu_report.py --cpu --timeout $(CPU_TIMEOUT) $(GPU_NOTEBOOKS)

## JupyterLab on the notebooks, with the package and its kernel ("Python 3 (attention_book)").
## As root (containers) JupyterLab needs --allow-root; LAB_ARGS passes more, e.g. LAB_ARGS=--no-browser.
LAB_ARGS ?=
lab: venv
	$(VENV)/bin/jupyter lab $$([ "$$(id -u)" = 0 ] && echo --allow-root) $(LAB_ARGS) notebooks

clean:
	rm -rf _build $(STAGE) $(SMOKE_STAGE) $(PUBLISH_STAGE) student _claims

## The seed check (not part of `make test`: about 20 minutes on 2 cores): every notebook for
## seeds 0-4 at ci size; writes book/_claims_report.json and book/_claims.md.
## make claims CLAIMS_ARGS="--notebooks ch05" reruns some notebooks and merges their counts.
CLAIMS_ARGS ?=
claims: venv
	@test -n "$$ATTENTION_BOOK_DATA" || echo "note: ATTENTION_BOOK_DATA is unset; chapters use downloaded (or, offline, generated) data"
	ATTENTION_BOOK_SIZE=$${ATTENTION_BOOK_SIZE:-ci} $(PY) scripts/claims.py $(CLAIMS_ARGS)

## Course editions (see book/instructors.md)
## make student                      -> student/ : notebooks without solutions (ignored by git; needs only python3, no torch)
## make grade SUBMISSIONS=dir [OUT=grades/grades.csv] [TIMEOUT=300: seconds per notebook] [JOBS=2: notebooks at once] [COURSE=course.toml] [GRADE_ARGS=--resume]
##   -> grades.csv, gradebook.csv, canvas.csv (only with a roster, see book/instructors.md), moodle.csv, feedback/, gradescope/ beside OUT
student:
	$(PYTHON) scripts/student_edition.py notebooks student

SUBMISSIONS ?= submissions
OUT ?= grades/grades.csv
TIMEOUT ?= 300
COURSE ?=
GRADE_ARGS ?=
# Grading never installs anything (no `venv` step): it runs on .venv's Python when there is one, else on
# $(PYTHON); GRADE_PYTHON=path/to/python picks an environment of your own that has the book's dependencies.
GRADE_PYTHON ?= $(if $(wildcard $(PY)),$(PY),$(PYTHON))
grade:
	bash scripts/ensure_debian_package.sh bubblewrap /usr/bin/bwrap "the grader's sandbox" || \
		echo "make grade: no bubblewrap; the grader will say what is not isolated"
	$(GRADE_PYTHON) scripts/grade.py "$(SUBMISSIONS)" --out "$(OUT)" --timeout $(TIMEOUT) --jobs $(JOBS) \
		$(if $(COURSE),--course "$(COURSE)") $(GRADE_ARGS)

## make gradescope-bundle [BUNDLE=grades/gradescope_autograder.zip] [NOTEBOOKS="ch03_exercises"] [COURSE=course.toml]
BUNDLE ?= grades/gradescope_autograder.zip
NOTEBOOKS ?=
gradescope-bundle:
	$(GRADE_PYTHON) scripts/gradescope_bundle.py build --out "$(BUNDLE)" $(if $(NOTEBOOKS),--notebooks $(NOTEBOOKS)) \
		$(if $(COURSE),--course "$(COURSE)")
