# agentrl/swebench-<project>:<version>: one environment image per project of the local SWE-bench set, built by
# scripts/build_swebench_images.sh (not by build_images.sh: this file is not named `Dockerfile` on purpose).
# The project's sdist is unpacked read-only into /opt/swebench/pristine (the FIXED tree, tests included); an
# episode copies it into the tmpfs workdir and reverse-applies the instance's gold patch to get the buggy
# base, so there is one image per project, not per instance, and no git history at all in the image.
ARG BASE_IMAGE=agentrl/sandbox-python:latest
FROM ${BASE_IMAGE}
ARG SDIST
USER root
COPY wheels/ /tmp/wheels/
COPY ${SDIST} /tmp/project.tar.gz
# wheels are zip files: extracting them into dist-packages is a pip install without pip (the image has none)
RUN python3 -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('/usr/local/lib/python3.11/dist-packages') for w in sorted(glob.glob('/tmp/wheels/*.whl'))]" \
    && mkdir -p /opt/swebench/pristine \
    && tar -xzf /tmp/project.tar.gz -C /opt/swebench/pristine --strip-components=1 --no-same-owner \
    && find /opt/swebench/pristine \( -name '*.egg-info' -o -name PKG-INFO \) -prune -exec rm -rf {} + \
    && chmod -R a-w,a+rX /opt/swebench \
    && rm -rf /tmp/wheels /tmp/project.tar.gz \
    && python3 -m pytest --version
USER 1000:1000
HEALTHCHECK --interval=60s --timeout=5s --start-period=5s --retries=3 CMD ["python3", "-c", "import pytest"]
CMD ["sleep", "infinity"]
