"""The service a log file belongs to, from where it is: the user's mapping, a Kubernetes path, else
the first directory under the root, else the file's own name.

A line that names its service (a JSON field, syslog's app-name) keeps its own; this is for the
lines that do not. The mapping is a TOML file (`DIAGNOSIS_LOG_SOURCES`) of globs, relative to the
log directory, and the service each one's files belong to:

    [services]
    "nginx/*" = "api-gateway"
    "postgresql/*" = "orders-db"

The first glob that matches wins; `*` matches across directories. Kubernetes writes a container's
logs under `pods/<namespace>_<pod>_<uid>/<container>/N.log` and links them as
`containers/<pod>_<namespace>_<container>-<id>.log`; their service is the pod's workload, its name
less the suffixes Kubernetes generates (`orders-7d9f8c6b5d-x2x4q` is `orders`).
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tools.sources.errors import SourceError
from tools.sources.limits import MAX_NAME_CHARS

# Kubernetes names generated suffixes from this alphabet (no vowels, no 0, 1 or 3, so no word is
# taken for one): a ReplicaSet's pod-template hash, then a pod's own five characters.
GENERATED = "[bcdfghjklmnpqrstvwxz2456789]"
POD_SUFFIX = re.compile(rf"-{GENERATED}{{5}}$")
TEMPLATE_HASH = re.compile(rf"-{GENERATED}{{6,10}}$")
STATEFUL_ORDINAL = re.compile(r"-\d+$")
POD_DIRECTORY = re.compile(r"^(?P<namespace>[^_]+)_(?P<pod>[^_]+)_(?P<uid>[0-9a-f-]{8,})$")
CONTAINER_FILE = re.compile(r"^(?P<pod>[^_]+)_(?P<namespace>[^_]+)_(?P<container>.+)-(?P<id>[0-9a-f]{64})\.log$")
# What rotation and compression add to a file's name: syslog.2.gz, access.log.1, app-20261201.log.
ROTATED = re.compile(r"(?:[.-]\d+)*(?:\.(?:gz|bz2|xz|zst|lz4))?$")


@dataclass(frozen=True)
class Place:
    service: str
    # How the service was found: "mapping", "kubernetes", "directory" or "file". A file directly
    # under the root (syslog, messages) usually holds many services' lines.
    how: str

    @property
    def shared(self) -> bool:
        return self.how == "file"


def workload(pod: str) -> str:
    """The Deployment, StatefulSet, DaemonSet or Job a pod belongs to, by its generated name."""
    if POD_SUFFIX.search(pod):
        name = POD_SUFFIX.sub("", pod)
        return TEMPLATE_HASH.sub("", name) or name
    return STATEFUL_ORDINAL.sub("", pod) or pod


def _kubernetes(parts: tuple[str, ...]) -> str | None:
    for at, part in enumerate(parts[:-1]):
        if part == "pods" and at + 1 < len(parts) - 1 and (found := POD_DIRECTORY.match(parts[at + 1])):
            return workload(found["pod"])
    if len(parts) >= 2 and parts[-2] == "containers" and (found := CONTAINER_FILE.match(parts[-1])):
        return workload(found["pod"])
    # The root may be /var/log/pods or /var/log/containers itself.
    if len(parts) == 3 and (found := POD_DIRECTORY.match(parts[0])):
        return workload(found["pod"])
    if len(parts) == 1 and (found := CONTAINER_FILE.match(parts[0])):
        return workload(found["pod"])
    return None


def _stem(name: str) -> str:
    base = ROTATED.sub("", name)
    return base.rsplit(".", 1)[0] if "." in base.lstrip(".") else base


class Places:
    """Where each file's lines come from, by the user's mapping and the default rules."""

    def __init__(self, mapping: tuple[tuple[str, str], ...] = ()):
        self.mapping = mapping

    @classmethod
    def from_file(cls, path: str | None) -> Places:
        if not path:
            return cls()
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise SourceError(f"log sources file {path} cannot be read: {exc.strerror or exc}") from None
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise SourceError(f"log sources file {path} is not TOML: {exc}") from None
        services = data.get("services")
        if not isinstance(services, dict) or not services or set(data) - {"services"}:
            raise SourceError(f"log sources file {path} must hold one [services] table of glob = service")
        for glob, service in services.items():
            if not isinstance(service, str) or not service.strip() or len(service) > MAX_NAME_CHARS:
                raise SourceError(f"log sources file {path}: the service of {glob!r} must be a name of at most "
                                  f"{MAX_NAME_CHARS} characters")
        return cls(tuple((glob, service.strip()) for glob, service in services.items()))

    def of(self, relative: str) -> Place:
        path = PurePosixPath(relative)
        for glob, service in self.mapping:
            if fnmatch.fnmatchcase(str(path), glob):
                return Place(service, "mapping")
        if service := _kubernetes(path.parts):
            return Place(service, "kubernetes")
        if len(path.parts) > 1:
            return Place(path.parts[0], "directory")
        return Place(_stem(path.name), "file")
