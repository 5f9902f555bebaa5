#!/usr/bin/env python3
"""Checks deploy/: the Kubernetes manifests under deploy/k8s agree with each other and with the
`tandem` binary, and the Dockerfiles under deploy/docker build an image that runs `tandem`.

    manifests_test.py --binary build/tandem --deploy deploy [unittest arguments]

Every failure names the file, the object (kind/name) and what disagrees. Needs PyYAML (Debian:
python3-yaml). With kubectl on the PATH it also renders the kustomization (`kubectl kustomize`).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
    import yaml
except ImportError:  # pragma: no cover - depends on the machine
    print("manifests_test.py: PyYAML is missing (Debian: apt-get install python3-yaml)",
          file=sys.stderr)
    sys.exit(1)

BINARY = None   # path of the tandem binary
DEPLOY = None   # path of deploy/
K8S = None      # path of deploy/k8s
DOCKER = None   # path of deploy/docker

WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod"}
SERVER_SUBCOMMANDS = {"coordinator": "--listen", "actor": "--listen"}
TOKEN_FLAG = "--token-file"
COORDINATOR_FLAG = "--coordinator"


# ------------------------------------------------------------------------------------------------
# Loading


class Obj:
    """One Kubernetes object: the file it is in and its document."""

    def __init__(self, path, doc):
        self.path = path
        self.doc = doc

    @property
    def kind(self):
        return self.doc.get("kind")

    @property
    def name(self):
        return (self.doc.get("metadata") or {}).get("name")

    def where(self):
        return f"{os.path.relpath(self.path, os.path.dirname(DEPLOY))}: {self.kind}/{self.name}"

    def pod_template(self):
        """(labels, pod spec) of the pods this object makes; None when it makes none."""
        spec = self.doc.get("spec") or {}
        if self.kind == "Pod":
            return (self.doc.get("metadata") or {}).get("labels") or {}, spec
        if self.kind == "CronJob":
            spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
        if self.kind in WORKLOAD_KINDS:
            template = spec.get("template") or {}
            labels = (template.get("metadata") or {}).get("labels") or {}
            return labels, (template.get("spec") or {})
        return None

    def pod_spec(self):
        template = self.pod_template()
        return template[1] if template else None

    def containers(self):
        spec = self.pod_spec() or {}
        return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


class Manifests:
    def __init__(self):
        self.parse_errors = []      # (file, message)
        self.files = {}             # path -> [documents]
        self.objects = []           # Obj for every Kubernetes object (not the Kustomization)
        self.kustomization = None
        self.kustomization_path = os.path.join(K8S, "kustomization.yaml")
        for root, _, names in os.walk(DEPLOY):
            for name in sorted(names):
                if not name.endswith((".yaml", ".yml")):
                    continue
                path = os.path.join(root, name)
                try:
                    with open(path, encoding="utf-8") as f:
                        docs = [d for d in yaml.safe_load_all(f) if d is not None]
                except (yaml.YAMLError, OSError) as e:
                    self.parse_errors.append((path, str(e).replace("\n", " ")))
                    continue
                self.files[path] = docs
                for doc in docs:
                    if not isinstance(doc, dict):
                        self.parse_errors.append((path, f"a document is a {type(doc).__name__}, "
                                                        "not a mapping"))
                        continue
                    if path == self.kustomization_path:
                        self.kustomization = doc
                    elif os.path.dirname(path) == K8S or path.startswith(K8S + os.sep):
                        self.objects.append(Obj(path, doc))

    def rel(self, path):
        return os.path.relpath(path, os.path.dirname(DEPLOY))

    def of_kind(self, kind):
        return [o for o in self.objects if o.kind == kind]

    def workloads(self):
        return [o for o in self.objects if o.pod_template() is not None]

    def find(self, kind, name):
        for o in self.objects:
            if o.kind == kind and o.name == name:
                return o
        return None

    def generator(self, kind):
        """{name: {key: value or None}} of the kustomization's secret/configMap generators."""
        field = {"Secret": "secretGenerator", "ConfigMap": "configMapGenerator"}[kind]
        out = {}
        for gen in (self.kustomization or {}).get(field) or []:
            keys = out.setdefault(gen.get("name"), {})
            for literal in gen.get("literals") or []:
                key, _, value = str(literal).partition("=")
                keys[key] = value
            for spec in gen.get("files") or []:
                key, sep, path = str(spec).partition("=")
                if not sep:
                    key, path = os.path.basename(key), key
                full = os.path.join(K8S, path)
                value = None
                if os.path.exists(full):
                    with open(full, encoding="utf-8") as f:
                        value = f.read()
                keys[key] = value
        return out

    def keys_of(self, kind, name):
        """Keys of a Secret or ConfigMap (manifest or generator) -> {key: value}; None if absent."""
        obj = self.find(kind, name)
        if obj is not None:
            keys = {}
            for field in ("data", "stringData", "binaryData"):
                keys.update(obj.doc.get(field) or {})
            return keys
        return self.generator(kind).get(name)

    def selects(self, selector, labels):
        return bool(selector) and all(labels.get(k) == v for k, v in selector.items())

    def pods_of_service(self, service):
        selector = (service.doc.get("spec") or {}).get("selector") or {}
        return [w for w in self.workloads() if self.selects(selector, w.pod_template()[0])]

    def tandem_image_names(self):
        names = {"tandem"}
        for image in (self.kustomization or {}).get("images") or []:
            if image.get("name"):
                names.add(image["name"])
        return names

    def tandem_containers(self):
        """(workload, container) for every container that runs the tandem image."""
        names = self.tandem_image_names()
        out = []
        for w in self.workloads():
            for c in w.containers():
                if image_name(c.get("image", "")) in names:
                    out.append((w, c))
        return out


def image_name(image):
    image = image.split("@", 1)[0]
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        image = image[: len(image) - len(last)] + last.split(":", 1)[0]
    return image


def flag_value(args, flag):
    """The value of --flag VALUE or --flag=VALUE in args; None when absent."""
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a[len(flag) + 1:]
    return None


def split_host_port(address):
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None, None
    return host, int(port)


def container_ports(container):
    """{name or number: number} of a container's ports."""
    ports = {}
    for p in container.get("ports") or []:
        number = p.get("containerPort")
        ports[number] = number
        if p.get("name"):
            ports[p["name"]] = number
    return ports


def mounted_key(container, pod_spec, path, kind, what):
    """((name, key, mount), None) of the `kind` key (Secret or ConfigMap) a container reads at
    path, or (None, the error) when no mount or no such volume holds it."""
    found = resolve_mount(container, pod_spec, path)
    if found is None or found[0] is None:
        return None, f"{what} {path} lies under no volume mount"
    volume, mount, relative = found
    source = file_in_volume(volume, relative)
    if source is None or source[0] != kind:
        return None, (f"{what} {path}: volume {volume.get('name')} (mounted at "
                      f"{mount.get('mountPath')}) is not a {kind}")
    return (source[1], source[2], mount), None


def resolve_mount(container, pod_spec, path):
    """(volume, mount, path below the mount) of the deepest mount holding path; None if none."""
    best = None
    for m in container.get("volumeMounts") or []:
        mount = m.get("mountPath", "").rstrip("/")
        if path == mount or path.startswith(mount + "/"):
            if best is None or len(mount) > len(best[1].get("mountPath", "").rstrip("/")):
                volume = next((v for v in pod_spec.get("volumes") or []
                               if v.get("name") == m.get("name")), None)
                best = (volume, m, path[len(mount):].lstrip("/"))
    return best


def volume_sources(volume):
    """[(kind, name, items)] of the Secrets and ConfigMaps a volume projects."""
    out = []
    if "secret" in volume:
        out.append(("Secret", volume["secret"].get("secretName"), volume["secret"].get("items")))
    if "configMap" in volume:
        out.append(("ConfigMap", volume["configMap"].get("name"), volume["configMap"].get("items")))
    for source in (volume.get("projected") or {}).get("sources") or []:
        if "secret" in source:
            out.append(("Secret", source["secret"].get("name"), source["secret"].get("items")))
        if "configMap" in source:
            out.append(("ConfigMap", source["configMap"].get("name"),
                        source["configMap"].get("items")))
    return out


def file_in_volume(volume, relative):
    """(kind, name, key) of the Secret/ConfigMap key a volume shows at relative; None if none."""
    for kind, name, items in volume_sources(volume):
        if items:
            for item in items:
                if item.get("path") == relative:
                    return kind, name, item.get("key")
        else:
            return kind, name, relative
    return None


# ------------------------------------------------------------------------------------------------
# The binary's help


_help_cache = {}


def run_help(*subcommand):
    key = tuple(subcommand)
    if key not in _help_cache:
        result = subprocess.run([BINARY, *subcommand, "--help"], capture_output=True, text=True,
                                timeout=60)
        _help_cache[key] = (result.returncode, result.stdout + result.stderr)
    return _help_cache[key]


def subcommands():
    rc, text = run_help()
    names = set()
    in_section = False
    for line in text.splitlines():
        if line.strip() == "Subcommands:":
            in_section = True
            continue
        if in_section:
            m = re.match(r"^\s+([a-z][a-z0-9-]*)(\s|$)", line)
            if m:
                names.add(m.group(1))
            elif line.strip() and not line.startswith(" "):
                in_section = False
    return rc, names


def help_flags(text):
    return set(re.findall(r"(?<![\w-])(--[A-Za-z0-9][A-Za-z0-9-]*|-[A-Za-z0-9])(?![\w-])", text))


# ------------------------------------------------------------------------------------------------
# The checks


M = None  # Manifests, loaded once


def setUpModule():
    global M
    M = Manifests()


class ManifestTest(unittest.TestCase):
    maxDiff = None

    def assertNoErrors(self, errors, what):
        if errors:
            self.fail(f"{what}: {len(errors)} problem(s):\n  " + "\n  ".join(errors))


class Parsing(ManifestTest):
    def test_every_yaml_parses_and_names_its_objects(self):
        errors = [f"{M.rel(p)}: does not parse: {e}" for p, e in M.parse_errors]
        self.assertTrue(M.files, f"no YAML files under {DEPLOY}")
        for path, docs in M.files.items():
            for doc in docs:
                if not isinstance(doc, dict):
                    continue
                for field in ("apiVersion", "kind"):
                    if not doc.get(field):
                        errors.append(f"{M.rel(path)}: a document has no {field}")
                named = (doc.get("metadata") or {}).get("name")
                if doc.get("kind") != "Kustomization" and not named:
                    errors.append(f"{M.rel(path)}: {doc.get('kind')} without metadata.name")
        seen = {}
        for o in M.objects:
            key = (o.kind, o.name)
            if key in seen:
                errors.append(f"{o.where()}: defined twice (also in {M.rel(seen[key])})")
            seen[key] = o.path
        self.assertNoErrors(errors, "YAML")


class Kustomization(ManifestTest):
    def test_resources_exist_and_every_manifest_is_listed(self):
        rel = M.rel(M.kustomization_path)
        self.assertIsNotNone(M.kustomization, f"{rel}: missing or unparsable")
        errors = []
        resources = M.kustomization.get("resources") or []
        listed = set()
        for r in resources:
            path = os.path.normpath(os.path.join(K8S, r))
            listed.add(path)
            if not os.path.exists(path):
                errors.append(f"{rel}: resource {r} does not exist")
        for name in sorted(os.listdir(K8S)):
            path = os.path.join(K8S, name)
            if name.endswith((".yaml", ".yml")) and path != M.kustomization_path:
                if path not in listed:
                    errors.append(f"{rel}: {name} is not listed in resources")
        if M.kustomization.get("namespace") != "tandem":
            errors.append(f"{rel}: namespace is {M.kustomization.get('namespace')!r}, "
                          "not 'tandem'")
        labels = M.kustomization.get("commonLabels") or {}
        if labels.get("app.kubernetes.io/part-of") != "tandem":
            errors.append(f"{rel}: commonLabels lacks app.kubernetes.io/part-of: tandem")
        images = [i.get("name") for i in M.kustomization.get("images") or []]
        if "tandem" not in images:
            errors.append(f"{rel}: images has no entry for the image name 'tandem'")
        # The token Secret comes from the secretGenerator, whose key is 'token'.
        token = M.generator("Secret").get("tandem-token")
        if token is None and M.find("Secret", "tandem-token") is None:
            errors.append(f"{rel}: no secretGenerator (or Secret) named tandem-token")
        elif token is not None and "token" not in token:
            errors.append(f"{rel}: secretGenerator tandem-token has keys {sorted(token)}, "
                          "not 'token'")
        self.assertNoErrors(errors, "kustomization")


class Selectors(ManifestTest):
    def test_workload_selectors_match_their_pod_labels(self):
        errors = []
        for w in M.workloads():
            if w.kind in ("Job", "CronJob", "Pod"):
                continue  # their selectors are generated
            selector = ((w.doc.get("spec") or {}).get("selector") or {})
            match = selector.get("matchLabels") or {}
            labels = w.pod_template()[0]
            if not match:
                errors.append(f"{w.where()}: spec.selector.matchLabels is empty")
            for k, v in match.items():
                if labels.get(k) != v:
                    errors.append(f"{w.where()}: selector {k}={v} but the pod template has "
                                  f"{k}={labels.get(k)!r}")
        self.assertNoErrors(errors, "workload selectors")

    def test_service_selectors_match_some_pods(self):
        errors = []
        for s in M.of_kind("Service"):
            selector = (s.doc.get("spec") or {}).get("selector") or {}
            if not selector:
                errors.append(f"{s.where()}: no selector")
            elif not M.pods_of_service(s):
                errors.append(f"{s.where()}: selector {selector} matches no workload's pod "
                              "template labels")
        self.assertNoErrors(errors, "service selectors")

    def test_statefulsets_name_their_headless_service(self):
        errors = []
        for w in M.of_kind("StatefulSet"):
            name = (w.doc.get("spec") or {}).get("serviceName")
            service = M.find("Service", name)
            if service is None:
                errors.append(f"{w.where()}: serviceName {name!r} names no Service")
                continue
            if (service.doc.get("spec") or {}).get("clusterIP") != "None":
                errors.append(f"{w.where()}: Service/{name} is not headless (clusterIP: None)")
            if w not in M.pods_of_service(service):
                errors.append(f"{w.where()}: Service/{name} does not select its pods")
        self.assertNoErrors(errors, "StatefulSet services")


class Ports(ManifestTest):
    def test_service_target_ports_are_container_ports(self):
        errors = []
        for s in M.of_kind("Service"):
            for p in (s.doc.get("spec") or {}).get("ports") or []:
                target = p.get("targetPort", p.get("port"))
                for w in M.pods_of_service(s):
                    if not any(target in container_ports(c) for c in w.containers()):
                        errors.append(f"{s.where()}: port {p.get('name') or p.get('port')} "
                                      f"targets {target!r}, which no container of {w.kind}/"
                                      f"{w.name} declares")
        self.assertNoErrors(errors, "service ports")

    def test_probe_ports_are_container_ports(self):
        errors = []
        for w in M.workloads():
            for c in w.containers():
                ports = container_ports(c)
                for probe_name in ("readinessProbe", "livenessProbe", "startupProbe"):
                    probe = c.get(probe_name)
                    if not probe:
                        continue
                    for handler in ("grpc", "httpGet", "tcpSocket"):
                        if handler in probe:
                            port = probe[handler].get("port")
                            if port not in ports:
                                errors.append(f"{w.where()}: container {c.get('name')}: "
                                              f"{probe_name}.{handler}.port {port!r} is not a "
                                              f"containerPort ({sorted(map(str, ports))})")
        self.assertNoErrors(errors, "probe ports")

    def test_servers_listen_on_their_ports_and_have_grpc_probes(self):
        errors = []
        for w, c in M.tandem_containers():
            args = [str(a) for a in c.get("args") or []]
            if not args or args[0] not in SERVER_SUBCOMMANDS:
                continue
            where = f"{w.where()}: container {c.get('name')}"
            ports = container_ports(c)
            for flag in ("--listen", "--metrics-listen"):
                value = flag_value(args, flag)
                if value is None:
                    if flag == "--listen":
                        errors.append(f"{where}: {args[0]} without --listen")
                    continue
                _, port = split_host_port(value)
                if port not in ports.values():
                    errors.append(f"{where}: {flag} {value}: port is not a containerPort")
            _, listen_port = split_host_port(flag_value(args, "--listen") or "")
            for probe_name in ("readinessProbe", "livenessProbe"):
                probe = c.get(probe_name) or {}
                if "grpc" not in probe:
                    errors.append(f"{where}: no grpc {probe_name}")
                    continue
                port = probe["grpc"].get("port")
                if port in ports and ports[port] != listen_port:
                    errors.append(f"{where}: {probe_name} probes port {port!r} (containerPort "
                                  f"{ports[port]}), but --listen is port {listen_port}")
        self.assertNoErrors(errors, "server ports")


class References(ManifestTest):
    def test_secrets_configmaps_and_claims_exist(self):
        errors = []
        for w in M.workloads():
            spec = w.pod_spec()
            for v in spec.get("volumes") or []:
                for kind, name, items in volume_sources(v):
                    keys = M.keys_of(kind, name)
                    if keys is None:
                        errors.append(f"{w.where()}: volume {v.get('name')}: {kind} {name!r} is "
                                      "not in the manifests or the kustomization's generators")
                        continue
                    for item in items or []:
                        if item.get("key") not in keys:
                            errors.append(f"{w.where()}: volume {v.get('name')}: {kind}/{name} "
                                          f"has no key {item.get('key')!r}")
                claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
                if claim is not None and M.find("PersistentVolumeClaim", claim) is None:
                    errors.append(f"{w.where()}: volume {v.get('name')}: "
                                  f"PersistentVolumeClaim {claim!r} does not exist")
            for c in w.containers():
                where = f"{w.where()}: container {c.get('name')}"
                for e in c.get("env") or []:
                    source = e.get("valueFrom") or {}
                    for field, kind in (("secretKeyRef", "Secret"),
                                        ("configMapKeyRef", "ConfigMap")):
                        ref = source.get(field)
                        if not ref:
                            continue
                        keys = M.keys_of(kind, ref.get("name"))
                        if keys is None:
                            errors.append(f"{where}: env {e.get('name')}: {kind} "
                                          f"{ref.get('name')!r} does not exist")
                        elif ref.get("key") not in keys:
                            errors.append(f"{where}: env {e.get('name')}: {kind}/"
                                          f"{ref.get('name')} has no key {ref.get('key')!r}")
                for e in c.get("envFrom") or []:
                    for field, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
                        ref = e.get(field)
                        if ref and M.keys_of(kind, ref.get("name")) is None:
                            errors.append(f"{where}: envFrom: {kind} {ref.get('name')!r} does "
                                          "not exist")
        self.assertNoErrors(errors, "references")

    def test_volume_mounts_name_pod_volumes(self):
        errors = []
        for w in M.workloads():
            volumes = {v.get("name") for v in w.pod_spec().get("volumes") or []}
            for c in w.containers():
                for m in c.get("volumeMounts") or []:
                    if m.get("name") not in volumes:
                        errors.append(f"{w.where()}: container {c.get('name')}: volumeMount "
                                      f"{m.get('name')!r} ({m.get('mountPath')}) names no volume "
                                      f"of the pod ({sorted(volumes)})")
        self.assertNoErrors(errors, "volume mounts")

    def test_args_use_only_defined_env(self):
        errors = []
        for w in M.workloads():
            for c in w.containers():
                env = {e.get("name") for e in c.get("env") or []}
                for a in (c.get("command") or []) + (c.get("args") or []):
                    for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(a)):
                        if var not in env:
                            errors.append(f"{w.where()}: container {c.get('name')}: argument "
                                          f"{a!r} uses $({var}), which env does not define")
        self.assertNoErrors(errors, "argument variables")


class Wiring(ManifestTest):
    """The tandem processes find each other, their token and their job."""

    def coordinator_pods(self):
        return [w for w, c in M.tandem_containers()
                if (c.get("args") or [None])[0] == "coordinator"]

    def actors(self):
        return [(w, c) for w, c in M.tandem_containers() if (c.get("args") or [None])[0] == "actor"]

    def test_there_is_one_coordinator_and_actor_pools(self):
        coordinators = self.coordinator_pods()
        self.assertEqual(len(coordinators), 1,
                         f"expected one workload running `tandem coordinator`, found "
                         f"{[w.where() for w in coordinators]}")
        self.assertTrue(self.actors(), "no workload runs `tandem actor`")

    def test_coordinator_address_names_the_coordinator_service(self):
        errors = []
        coordinators = self.coordinator_pods()
        for w, c in M.tandem_containers():
            args = [str(a) for a in c.get("args") or []]
            value = flag_value(args, COORDINATOR_FLAG)
            if not args or args[0] == "coordinator":
                continue
            where = f"{w.where()}: container {c.get('name')}"
            if value is None:
                errors.append(f"{where}: {args[0]} without {COORDINATOR_FLAG} (its default "
                              "127.0.0.1:7070 is the pod itself)")
                continue
            host, port = split_host_port(value)
            service = M.find("Service", (host or "").split(".")[0])
            if service is None:
                errors.append(f"{where}: {COORDINATOR_FLAG} {value}: {host!r} is no Service")
                continue
            if not any(p in coordinators for p in M.pods_of_service(service)):
                errors.append(f"{where}: {COORDINATOR_FLAG} {value}: {service.where()} does not "
                              "select the coordinator's pods")
            service_ports = {p.get("port"): p for p in (service.doc.get("spec") or {}).get("ports")
                             or []}
            if port not in service_ports:
                errors.append(f"{where}: {COORDINATOR_FLAG} {value}: port {port} is not a port "
                              f"of {service.where()} ({sorted(service_ports)})")
                continue
            target = service_ports[port].get("targetPort", port)
            for cw in coordinators:
                for cc in cw.containers():
                    cargs = [str(a) for a in cc.get("args") or []]
                    if not cargs or cargs[0] != "coordinator":
                        continue
                    _, listen = split_host_port(flag_value(cargs, "--listen") or "")
                    reached = container_ports(cc).get(target)
                    if reached != listen:
                        errors.append(f"{where}: {COORDINATOR_FLAG} {value}: {service.where()} "
                                      f"port {port} leads to {target!r} (containerPort "
                                      f"{reached}), not to the coordinator's --listen port "
                                      f"{listen}")
        self.assertNoErrors(errors, "coordinator address")

    def test_token_file_is_a_key_of_a_mounted_secret(self):
        errors = []
        for w, c in M.tandem_containers():
            args = [str(a) for a in c.get("args") or []]
            where = f"{w.where()}: container {c.get('name')}"
            path = flag_value(args, TOKEN_FLAG)
            if path is None:
                errors.append(f"{where}: {(args or ['?'])[0]} without {TOKEN_FLAG}")
                continue
            found, error = mounted_key(c, w.pod_spec(), path, "Secret", TOKEN_FLAG)
            if error:
                errors.append(f"{where}: {error}")
                continue
            name, key, mount = found
            keys = M.keys_of("Secret", name)
            if keys is not None and key not in keys:
                errors.append(f"{where}: {TOKEN_FLAG} {path}: Secret/{name} has no key "
                              f"{key!r} ({sorted(keys)})")
            if not mount.get("readOnly"):
                errors.append(f"{where}: the token mount {mount.get('mountPath')} is not readOnly")
        self.assertNoErrors(errors, "token files")

    def test_actors_advertise_their_stable_dns_names(self):
        errors = []
        for w, c in self.actors():
            args = [str(a) for a in c.get("args") or []]
            where = f"{w.where()}: container {c.get('name')}"
            advertise = flag_value(args, "--advertise")
            if w.kind != "StatefulSet":
                errors.append(f"{where}: actors run in a StatefulSet (stable names), "
                              f"not a {w.kind}")
                continue
            if advertise is None:
                errors.append(f"{where}: actor without --advertise (it would advertise 0.0.0.0)")
                continue
            host, port = split_host_port(advertise)
            labels = (host or "").split(".")
            service = (w.doc.get("spec") or {}).get("serviceName")
            env = {e.get("name"): ((e.get("valueFrom") or {}).get("fieldRef") or {})
                   .get("fieldPath") for e in c.get("env") or []}
            first = re.fullmatch(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", labels[0])
            if not first or env.get(first.group(1)) != "metadata.name":
                errors.append(f"{where}: --advertise {advertise}: the host does not start with "
                              "the pod's name from the downward API (metadata.name)")
            if len(labels) < 2 or labels[1] != service:
                errors.append(f"{where}: --advertise {advertise}: the second label is not the "
                              f"StatefulSet's serviceName {service!r}")
            _, listen = split_host_port(flag_value(args, "--listen") or "")
            if port != listen:
                errors.append(f"{where}: --advertise port {port} is not the --listen port {listen}")
        self.assertNoErrors(errors, "advertised addresses")

    def test_actors_share_the_coordinators_state_volume(self):
        errors = []
        for cw in self.coordinator_pods():
            for cc in cw.containers():
                cargs = [str(a) for a in cc.get("args") or []]
                if not cargs or cargs[0] != "coordinator":
                    continue
                state_dir = flag_value(cargs, "--state-dir")
                found = resolve_mount(cc, cw.pod_spec(), state_dir or "")
                if state_dir is None or found is None or found[0] is None \
                        or "persistentVolumeClaim" not in found[0]:
                    errors.append(f"{cw.where()}: --state-dir {state_dir} is not on a "
                                  "PersistentVolumeClaim")
                    continue
                claim = found[0]["persistentVolumeClaim"].get("claimName")
                # Run directories default to <state-dir>/jobs/<id>: the actors write checkpoint
                # shards there, so they need the same claim at the same path.
                for w, c in self.actors():
                    theirs = resolve_mount(c, w.pod_spec(), state_dir)
                    their_claim = None
                    if theirs is not None and theirs[0] is not None:
                        pvc_source = theirs[0].get("persistentVolumeClaim") or {}
                        their_claim = pvc_source.get("claimName")
                    if their_claim != claim or theirs[2] != found[2]:
                        errors.append(f"{w.where()}: container {c.get('name')} does not mount "
                                      f"PersistentVolumeClaim/{claim} at the coordinator's "
                                      f"--state-dir {state_dir} (run directories are shared)")
                pvc = M.find("PersistentVolumeClaim", claim)
                modes = ((pvc.doc.get("spec") or {}).get("accessModes") or []) if pvc else []
                if pvc and self.actors() and "ReadWriteMany" not in modes:
                    errors.append(f"{pvc.where()}: accessModes {modes}: the coordinator and the "
                                  "actors mount it at once, it needs ReadWriteMany")
        self.assertNoErrors(errors, "state volume")

    def test_submitted_job_matches_the_pools(self):
        errors = []
        submits = [(w, c) for w, c in M.tandem_containers()
                   if (c.get("args") or [None])[0] == "submit"]
        self.assertTrue(submits, "no workload runs `tandem submit`")
        replicas = {}   # pool -> [(StatefulSet, replicas)]
        for w, c in self.actors():
            pool = flag_value([str(a) for a in c.get("args") or []], "--pool")
            replicas.setdefault(pool, []).append((w, (w.doc.get("spec") or {}).get("replicas", 1)))
        for w, c in submits:
            args = [str(a) for a in c.get("args") or []]
            where = f"{w.where()}: container {c.get('name')}"
            if len(args) < 2 or args[1].startswith("-"):
                errors.append(f"{where}: submit's first argument is not the job file: {args}")
                continue
            path = args[1]
            found, error = mounted_key(c, w.pod_spec(), path, "ConfigMap", "job file")
            if error:
                errors.append(f"{where}: {error}")
                continue
            source = ("ConfigMap", found[0], found[1])
            keys = M.keys_of("ConfigMap", source[1])
            if keys is None or source[2] not in keys:
                errors.append(f"{where}: job file {path}: ConfigMap/{source[1]} has no key "
                              f"{source[2]!r}")
                continue
            cm = M.find("ConfigMap", source[1])
            cm_where = cm.where() if cm else f"ConfigMap/{source[1]}"
            try:
                spec = json.loads(keys[source[2]])
            except (TypeError, ValueError) as e:
                errors.append(f"{cm_where}: {source[2]} is not JSON: {e}")
                continue
            pools = set()
            for group in ("vision", "llm"):
                g = spec.get(group) or {}
                pool = g.get("pool", group)
                actors = g.get("actors", 1)
                pools.add(pool)
                sets = replicas.get(pool)
                if not sets:
                    errors.append(f"{cm_where}: {source[2]}: {group}.pool {pool!r} is the --pool "
                                  "of no actor StatefulSet")
                    continue
                total = sum(r for _, r in sets)
                if total != actors:
                    errors.append(f"{cm_where}: {source[2]}: {group}.actors is {actors}, but "
                                  f"pool {pool!r} has {total} replicas "
                                  f"({', '.join(f'{s.where()}: {r}' for s, r in sets)})")
            if pools != set(replicas):
                errors.append(f"{cm_where}: {source[2]}: pools {sorted(pools)} differ from the "
                              f"actors' --pool values {sorted(map(str, replicas))}")
            example = os.path.join(os.path.dirname(DEPLOY), "examples", "shapes_vlm.json")
            if os.path.exists(example) and spec.get("name") == "shapes-vlm":
                with open(example, encoding="utf-8") as f:
                    reference = json.load(f)
                mine = json.loads(json.dumps(spec))
                for group in ("vision", "llm"):
                    for g in (mine, reference):
                        (g.get(group) or {}).pop("pool", None)
                if mine != reference:
                    errors.append(f"{cm_where}: {source[2]} differs from examples/shapes_vlm.json "
                                  "in more than vision.pool/llm.pool: copy it again")
        self.assertNoErrors(errors, "submitted job")


class Binary(ManifestTest):
    def test_args_are_subcommands_and_flags_of_the_binary(self):
        self.assertTrue(BINARY and os.access(BINARY, os.X_OK), f"no executable binary: {BINARY}")
        rc, names = subcommands()
        self.assertEqual(rc, 0, f"`{BINARY} --help` exited with {rc}")
        self.assertTrue(names, f"`{BINARY} --help` lists no subcommands")
        errors = []
        containers = M.tandem_containers()
        self.assertTrue(containers, "no container runs the tandem image")
        for w, c in containers:
            where = f"{w.where()}: container {c.get('name')}"
            command = c.get("command")
            if command and os.path.basename(str(command[0])) != "tandem":
                errors.append(f"{where}: command {command} replaces the image's tandem entrypoint")
                continue
            args = [str(a) for a in (command or [])[1:]] + [str(a) for a in c.get("args") or []]
            if not args or args[0] not in names:
                errors.append(f"{where}: args[0] {args[:1]} is not a subcommand of "
                              f"`tandem --help` ({sorted(names)})")
                continue
            rc, text = run_help(args[0])
            known = help_flags(text)
            for a in args[1:]:
                if not a.startswith("-") or a == "-":
                    continue
                flag = a.split("=", 1)[0]
                if flag not in known:
                    errors.append(f"{where}: {flag} is not in `tandem {args[0]} --help`")
        self.assertNoErrors(errors, f"flags against {BINARY}")


class Dockerfiles(ManifestTest):
    def stages(self, path):
        """[(FROM line, [instructions])] with continuation lines joined and comments dropped."""
        stages, current = [], None
        with open(path, encoding="utf-8") as f:
            pending = ""
            for line in f.read().split("\n"):
                if line.strip().startswith("#"):
                    continue
                if line.endswith("\\"):
                    pending += line[:-1]
                    continue
                instruction = (pending + line).strip()
                pending = ""
                if not instruction:
                    continue
                if instruction.upper().startswith("FROM "):
                    current = (instruction, [])
                    stages.append(current)
                elif current is not None:
                    current[1].append(instruction)
        return stages

    def test_dockerfiles_build_a_tandem_runtime_image(self):
        errors = []
        for name in ("Dockerfile.cpu", "Dockerfile.cuda"):
            path = os.path.join(DOCKER, name)
            rel = M.rel(path)
            if not os.path.exists(path):
                errors.append(f"{rel}: missing")
                continue
            stages = self.stages(path)
            if len(stages) < 2:
                errors.append(f"{rel}: {len(stages)} stage(s); expected a build and a runtime "
                              "stage")
                continue
            runtime = stages[-1][1]
            entrypoints = [i for i in runtime if i.upper().startswith("ENTRYPOINT")]
            if not entrypoints:
                errors.append(f"{rel}: the runtime stage ({stages[-1][0]}) has no ENTRYPOINT")
            else:
                try:
                    entry = json.loads(entrypoints[-1].split(None, 1)[1])
                except ValueError:
                    entry = None
                if not entry or os.path.basename(entry[0]) != "tandem":
                    errors.append(f"{rel}: the runtime stage's {entrypoints[-1]} is not the exec "
                                  "form of tandem")
            if not any(i.upper().startswith("COPY") and "--from=" in i
                       and "/usr/local/bin/tandem" in i for i in runtime):
                errors.append(f"{rel}: the runtime stage copies no binary to /usr/local/bin/tandem")
            users = [i.split(None, 1)[1].split(":")[0] for i in runtime
                     if i.upper().startswith("USER ")]
            if not users or users[-1] in ("root", "0"):
                errors.append(f"{rel}: the runtime stage runs as root (no non-root USER)")
            ignore = path + ".dockerignore"
            if not os.path.exists(ignore):
                errors.append(f"{M.rel(ignore)}: missing (the build context is the repository "
                              "root; build directories must stay out of it)")
            else:
                with open(ignore, encoding="utf-8") as f:
                    patterns = [l.strip() for l in f if l.strip() and not l.startswith("#")]
                if not any(p.strip("/").startswith("build") for p in patterns):
                    errors.append(f"{M.rel(ignore)}: does not exclude build*/")
        self.assertNoErrors(errors, "Dockerfiles")


class Render(ManifestTest):
    """kubectl kustomize renders the manifests (with a made-up token), when kubectl is here."""

    def test_kustomize_renders(self):
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            self.skipTest("kubectl is not on the PATH")
        with tempfile.TemporaryDirectory() as tmp:
            copy = os.path.join(tmp, "k8s")
            shutil.copytree(K8S, copy)
            token = os.path.join(copy, "token.txt")
            if not os.path.exists(token):
                with open(token, "w", encoding="utf-8") as f:
                    f.write("0" * 64)
            result = subprocess.run([kubectl, "kustomize", copy], capture_output=True, text=True,
                                    timeout=120)
        self.assertEqual(result.returncode, 0,
                         f"kubectl kustomize {M.rel(K8S)} failed: {result.stderr.strip()}")
        docs = [d for d in yaml.safe_load_all(result.stdout) if d]
        errors = []
        secrets = [d["metadata"]["name"] for d in docs if d.get("kind") == "Secret"]
        for d in docs:
            where = f"rendered {d.get('kind')}/{d['metadata'].get('name')}"
            if d["metadata"].get("namespace") != "tandem":
                errors.append(f"{where}: namespace {d['metadata'].get('namespace')!r}")
            if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/part-of") != "tandem":
                errors.append(f"{where}: no app.kubernetes.io/part-of: tandem label")
            spec = Obj("", d).pod_spec()
            for v in (spec or {}).get("volumes") or []:
                name = (v.get("secret") or {}).get("secretName")
                if name is not None and name not in secrets:
                    errors.append(f"{where}: volume {v.get('name')}: Secret {name} not rendered")
        self.assertNoErrors(errors, "kubectl kustomize")


def main():
    global BINARY, DEPLOY, K8S, DOCKER
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", required=True, help="the tandem binary")
    parser.add_argument("--deploy", required=True, help="the deploy/ directory")
    args, rest = parser.parse_known_args()
    BINARY = os.path.abspath(args.binary)
    DEPLOY = os.path.abspath(args.deploy)
    K8S = os.path.join(DEPLOY, "k8s")
    DOCKER = os.path.join(DEPLOY, "docker")
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
