# shardfeed: two commands do everything on a fresh machine.
#   make demo   set up .venv, make a sample raw dataset, shard it, load it, print throughput
#   make test   set up .venv, run the test suite
# Override the torch requirement for another machine: TORCH=torch make demo
# (the default pins the CPU build that installs locally in under a minute).

PYTHON   ?= python3
TORCH    ?= torch==2.13.0
VENV     := .venv
PY       := $(VENV)/bin/python
PIP      := $(PY) -m pip --disable-pip-version-check -q
STAMP    := $(VENV)/.installed
DEMO     ?= demo
DEMO_IMAGES ?= 600

.PHONY: demo test venv system-deps clean bench

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install "$(TORCH)" numpy pyarrow webdataset pytest hypothesis simplejpeg matplotlib
	@# Pillow-SIMD (AVX2) where a compiler exists, else stock Pillow with a warning.
	@if $(PY) -c "import PIL, sys; sys.exit(0 if 'post' in PIL.__version__ else 1)" 2>/dev/null; then \
	  echo "Pillow-SIMD already installed"; \
	elif command -v cc >/dev/null 2>&1 && $(PIP) uninstall -y pillow >/dev/null 2>&1; \
	     CC="cc -mavx2" $(PIP) install --no-binary :all: pillow-simd; then \
	  echo "Pillow-SIMD built"; \
	else \
	  echo "WARNING: could not build Pillow-SIMD; falling back to stock Pillow (slower resize)" >&2; \
	  $(PIP) install pillow; \
	fi
	@$(PY) -c "import PIL.features as f; missing=[c for c in ('webp','libtiff','littlecms2') if not f.check(c)]; missing and print('WARNING: Pillow lacks', ', '.join(missing), '- install libwebp-dev libtiff-dev liblcms2-dev (make system-deps) and rm -r $(VENV)')"
	$(PIP) install --no-deps -e .
	touch $(STAMP)

# System packages (Debian, needs root): codec headers for the Pillow-SIMD build and jemalloc.
system-deps:
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libjpeg-dev zlib1g-dev libpng-dev \
	  libwebp-dev libtiff-dev liblcms2-dev libfreetype-dev libjemalloc2 >/dev/null

demo: $(STAMP)
	rm -rf $(DEMO)
	$(PY) -m dataprep.synthetic $(DEMO)/raw --images $(DEMO_IMAGES) --seed 0
	$(VENV)/bin/dataprep shard $(DEMO)/raw/images $(DEMO)/shards --shard-size 16MB --resize-short 256
	$(VENV)/bin/dataprep info $(DEMO)/shards
	$(PY) examples/load_shards.py $(DEMO)/shards --raw $(DEMO)/raw/images

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m tools.shard_bench

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache .hypothesis
