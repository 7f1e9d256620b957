# Thin aliases for dev.py, which does the real work (venv, embedded PostgreSQL/Redis, processes).
#   make run                      web + Celery worker + beat on http://127.0.0.1:8000/
#   make test                     ruff check . and pytest
#   make test ARGS="-k quota -x"  extra pytest arguments
#   make lint                     ruff check . only
PYTHON ?= python3
ARGS ?=

.PHONY: run test lint

run:
	$(PYTHON) dev.py run

test:
	$(PYTHON) dev.py test $(ARGS)

lint:
	$(PYTHON) dev.py lint
