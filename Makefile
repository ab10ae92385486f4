# make run: set up and start the service with a demo tenant; make test: the whole suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 5000
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
PG_DEFAULT := postgresql://postgres@127.0.0.1:5432/test
export FLASK_APP := wsgi
export TEST_REDIS_URL
# The browser tests drive this Chromium (the system's by default; Playwright downloads none).
export CHROMIUM
# One pass of the suite: most tests two at a time (pytest-xdist; each worker has its own
# database and Redis DB), then those marked slow one at a time: the fault and load tests, so
# that their clocks time the service and not the other tests, and the contract test (wholly
# slow, and left uncollected by the first part: its cases are built as it is collected).
PYTEST_PASS = $(BIN)/pytest -m "not soak and not slow" -n 2 --ignore=tests/test_contract.py \
	&& $(BIN)/pytest -m "slow and not soak"

.PHONY: run test test-postgres lint soak bench install install-dev clean

$(BIN)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed: make PYTHON=python3.12 ...")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

# The service with its development tools, and the voice runtime (bridge/, a distribution of
# its own) whose tests run in the same suite.
$(BIN)/.installed-dev: $(BIN)/.installed bridge/pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev]' -e './bridge[handoff]'
	touch $@

install: $(BIN)/.installed
install-dev: $(BIN)/.installed-dev

# The port first (a second make run must change nothing, not even the demo owner's password,
# while another one serves), then
# the development settings, written once to instance/config.py, where every flask command
# reads them too.
run: install
	@$(BIN)/flask dev check-port --host 127.0.0.1 $(PORT)
	@$(BIN)/flask dev config
	$(BIN)/flask db upgrade
	$(BIN)/flask demo
	$(BIN)/flask run --host 127.0.0.1 --port $(PORT)

lint: install-dev
	$(BIN)/ruff check app bridge tests bench deploy docs/examples worker.py wsgi.py
	$(BIN)/ruff format --check app bridge tests bench deploy docs/examples worker.py wsgi.py
	$(BIN)/mypy app bridge/voiceagent_bridge bridge/bots/twilio
	@# Each bot is a folder of scripts with the same module names (bot, server): one run each.
	$(BIN)/mypy bridge/bots/webrtc
	$(BIN)/mypy bridge/bots/whatsapp
	@# Imports run one way, with no circle, and never into the bridge: pyproject.toml's contracts.
	$(BIN)/lint-imports --no-cache
	@# The docs site must build without a warning (broken links and anchors included).
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

test: install-dev lint
	@$(BIN)/python -c "import redis, sys; redis.Redis.from_url('$(TEST_REDIS_URL)', socket_connect_timeout=2).ping()" 2>/dev/null || { \
		echo "make test needs Redis at $(TEST_REDIS_URL) (set TEST_REDIS_URL to use another)."; \
		echo "Install and start it: apt-get install redis-server && redis-server --daemonize yes"; \
		exit 1; }
	@command -v "$${CHROMIUM:-chromium}" >/dev/null || { \
		echo "make test needs Chromium for the browser tests (set CHROMIUM=/path/to/chromium to use another)."; \
		echo "Install it: apt-get install chromium (Debian)"; \
		exit 1; }
	@command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { \
		echo "make test needs nginx for the deployment test (tests/system/test_nginx.py)."; \
		echo "Install it: apt-get install nginx (Debian)"; \
		exit 1; }
	@command -v npm >/dev/null || { \
		echo "make test needs npm for the TypeScript client test (tests/system/test_typescript_client.py)."; \
		echo "Install it: apt-get install npm (Debian)"; \
		exit 1; }
	@for tool in curl jq; do command -v $$tool >/dev/null || { \
		echo "make test needs $$tool for the README tour test (tests/system/test_readme_tour.py)."; \
		echo "Install it: apt-get install $$tool (Debian)"; \
		exit 1; }; done
	@echo "SQLite pass"
	export TEST_DATABASE_URL=; $(PYTEST_PASS)
	@$(MAKE) --no-print-directory test-postgres

# The suite again on PostgreSQL: TEST_DATABASE_URL when set (then it must answer),
# else the local server when one answers.
test-postgres: install-dev
	@url="$${TEST_DATABASE_URL:-}"; \
	if [ -z "$$url" ]; then \
		if $(BIN)/python -c "import psycopg2; psycopg2.connect('$(PG_DEFAULT)', connect_timeout=2).close()" 2>/dev/null; then \
			url="$(PG_DEFAULT)"; \
		else \
			echo "PostgreSQL pass skipped: nothing answers at $(PG_DEFAULT) (set TEST_DATABASE_URL to run it)."; \
			exit 0; \
		fi; \
	fi; \
	$(BIN)/python -c "import psycopg2, sys; psycopg2.connect(sys.argv[1], connect_timeout=3).close()" "$$url" || { \
		echo "TEST_DATABASE_URL=$$url does not answer: start PostgreSQL or unset it."; exit 1; }; \
	echo "PostgreSQL pass against $$url"; \
	export TEST_DATABASE_URL="$$url"; $(PYTEST_PASS)

soak: install-dev
	$(BIN)/pytest -m soak

bench: install-dev
	@for script in bench/*.py; do \
		case "$$script" in */seed.py|*/_*) continue;; esac; \
		echo "== $$script"; $(BIN)/python "$$script" || exit 1; \
	done

clean:
	rm -rf $(VENV) site .pytest_cache .ruff_cache .mypy_cache .hypothesis tests/system/typescript/node_modules
