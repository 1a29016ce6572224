# shardfeed: two commands do everything on a fresh machine.
#   make demo   set up .venv, make a sample raw dataset, shard it, load it, print throughput;
#               then tokenize a text corpus, train a small LM 100 steps, resume it on 2 workers
#   make test   set up .venv, run the test suite
#   make check  set up .venv, then ruff, mypy and the structure review (python -m tools.review)
#   make docs   set up .venv, build the manual and the API reference (mkdocs --strict) into site/
# Override the torch requirement for another machine: TORCH=torch make demo
# (the default pins the CPU build that installs locally in under a minute).
# Stock Pillow instead of Pillow-SIMD (both supported, both tested):
#   make PILLOW=stock VENV=.venv-stock test

PYTHON   ?= python3
TORCH    ?= torch==2.13.0
VENV     ?= .venv
PILLOW   ?= simd
PY       := $(VENV)/bin/python
PIP      := $(PY) -m pip --disable-pip-version-check -q
STAMP    := $(VENV)/.installed
DEMO     ?= demo
DEMO_IMAGES ?= 600
# Every extra of pyproject.toml but "gpu" (nvImageCodec with the CUDA nvJPEG libraries, for a CUDA machine;
# the test extra brings the codec alone, whose CPU backend runs the device-decode path in CI):
# the packages are declared there once (tests/test_packaging.py checks).
EXTRAS   ?= test,ray,tokens,remote,dev,plot,docs
LINTED   := dataprep loaders tools tests examples

.PHONY: demo test check docs venv pillow pillow-stock pillow-simd system-deps clean bench

venv: $(STAMP)

# Order matters. torch first, pinned for this machine ($(TORCH): the CPU build here), so that
# pyproject's "torch>=2.13" is met by it and pip keeps it. Then the package and its extras, from
# pyproject.toml. Its "pillow" installs stock Pillow when only Pillow-SIMD is there (pip sees
# pillow-simd as another distribution), so the Pillow step comes last and puts the chosen one back.
$(STAMP): pyproject.toml setup.py loaders/read/_jpeg_region.c Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install "$(TORCH)"
	$(PIP) install -e ".[$(EXTRAS)]"
	@$(MAKE) --no-print-directory pillow
	@$(PY) -c "import loaders.read.region as r, sys; sys.exit(0 if r.is_available() else 1)" \
	  || echo "NOTE: loaders.read._jpeg_region not built (needs cc and libjpeg62-turbo-dev): crops decode whole JPEGs (slower, same pixels)" >&2
	touch $(STAMP)

# Pillow-SIMD (AVX2) only where it can read every format users have: a source build gets
# just the codecs whose headers are present, so they are installed first where we can
# (root with apt), and a build that still lacks one is replaced by the stock Pillow wheel
# (which carries every codec), saying so. Never a Pillow that silently cannot read WebP/TIFF.
CODEC_HEADERS := libjpeg-dev zlib1g-dev libpng-dev libwebp-dev libtiff-dev liblcms2-dev libfreetype-dev
HAS_CODECS    := import PIL.features as f, sys; missing = [c for c in ('jpg', 'zlib', 'webp', 'libtiff', 'littlecms2') if not f.check(c)]; print(' '.join(missing)); sys.exit(1 if missing else 0)
IS_SIMD       := import PIL, sys; sys.exit(0 if 'post' in PIL.__version__ else 1)

pillow: pillow-$(PILLOW)

pillow-stock:
	@$(PIP) uninstall -y pillow-simd >/dev/null 2>&1 || true
	$(PIP) install --force-reinstall --no-deps pillow
	@if $(PY) -c "$(IS_SIMD)"; then echo "ERROR: PILLOW=stock, yet Pillow-SIMD is what imports" >&2; exit 1; fi
	@echo "stock Pillow (PILLOW=stock)"

# A source build (never a wheel pip cached from an earlier build, which may lack codecs).
pillow-simd:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1 \
	    && ! dpkg -s $(CODEC_HEADERS) >/dev/null 2>&1; then \
	  echo "installing codec headers for the Pillow-SIMD build (make system-deps)"; \
	  $(MAKE) --no-print-directory system-deps || echo "could not install the codec headers" >&2; \
	fi
	@if $(PY) -c "$(IS_SIMD)" 2>/dev/null && $(PY) -c "$(HAS_CODECS)" >/dev/null 2>&1; then \
	  echo "Pillow-SIMD already installed, every codec present"; \
	elif command -v cc >/dev/null 2>&1 && { $(PIP) uninstall -y pillow pillow-simd >/dev/null 2>&1; \
	     CC="cc -mavx2" $(PIP) install --no-cache-dir --no-binary :all: pillow-simd; } \
	     && missing=$$($(PY) -c "$(HAS_CODECS)"); then \
	  echo "Pillow-SIMD built with every codec"; \
	else \
	  missing=$$($(PY) -c "$(HAS_CODECS)" 2>/dev/null); why="could not build"; \
	  [ -z "$$missing" ] || why="built without $$missing"; \
	  echo "NOTE: Pillow-SIMD skipped ($$why): using the stock" \
	       "Pillow wheel (every codec, slower resize). For SIMD: apt-get install $(CODEC_HEADERS), then rm -r $(VENV)" >&2; \
	  $(PIP) uninstall -y pillow pillow-simd >/dev/null 2>&1; $(PIP) install pillow; \
	fi
	@missing=$$($(PY) -c "$(HAS_CODECS)") || { echo "ERROR: Pillow cannot read: $$missing" >&2; exit 1; }

# System packages (Debian, needs root): codec headers for the Pillow-SIMD build and jemalloc.
system-deps:
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(CODEC_HEADERS) libjemalloc2 >/dev/null

demo: $(STAMP)
	rm -rf $(DEMO)
	$(PY) -m dataprep.synthetic $(DEMO)/raw --images $(DEMO_IMAGES) --seed 0
	$(VENV)/bin/dataprep shard $(DEMO)/raw/images $(DEMO)/shards --shard-size 16MB --resize-short 256
	$(VENV)/bin/dataprep info $(DEMO)/shards
	$(PY) examples/load_shards.py $(DEMO)/shards --raw $(DEMO)/raw/images
	$(PY) examples/train_lm.py $(DEMO)/lm-tokens --demo --steps 100 --checkpoint $(DEMO)/lm.pt
	$(PY) examples/train_lm.py $(DEMO)/lm-tokens --steps 150 --checkpoint $(DEMO)/lm.pt --resume --workers 2

test: $(STAMP)
	$(PY) -m pytest -q

# Lint, types, then the structure review, whose hard rule (no import cycle) fails the target.
check: $(STAMP)
	$(PY) -m ruff check $(LINTED)
	$(PY) -m mypy
	$(PY) -m tools.review

# The manual (docs/*.md) and the API reference from the docstrings, warnings as errors, into site/.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	$(PY) -m tools.bench.shard_bench

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache .hypothesis site
