#!/usr/bin/env python3
"""deploy/kubernetes/ cannot run here (no cluster): its manifests are checked for syntax and for what a
cluster would refuse or what would break sluice (TAP output). YAML parses (python3-yaml); every object has
apiVersion, kind, metadata.name and the namespace; the kustomization lists every manifest; the DaemonSet's
selector matches its template, every container has a name and an image, every volumeMount names a
volume, every ConfigMap volume and the ServiceAccount exist, it runs in the host network with the CNI
directories mounted; the organisation policy passes `sluicectl policy check --layer org`; the conflist is
JSON whose first plugin is sluice-cni and whose sluice-cni configuration the real plugin parses and whose
policies compile (it stops only at "sluiced is not running")."""
import json, os, subprocess, sys

import yaml

SRC = os.environ["SLUICE_SOURCE_DIR"]
BUILD = os.environ["SLUICE_BUILD_DIR"]
DIR = os.path.join(SRC, "deploy", "kubernetes")
n = failed = 0


def check(desc, ok, why=""):
    global n, failed
    n += 1
    print(("ok %d - %s" % (n, desc)) if ok else ("not ok %d - %s" % (n, desc)))
    if not ok:
        failed += 1
        for line in str(why).splitlines():
            print("#   " + line)


docs = {}
files = sorted(f for f in os.listdir(DIR) if f.endswith(".yaml"))
for f in files:
    try:
        with open(os.path.join(DIR, f)) as fh:
            docs[f] = [d for d in yaml.safe_load_all(fh) if d is not None]
        check("%s parses as YAML" % f, True)
    except yaml.YAMLError as e:
        check("%s parses as YAML" % f, False, e)
        docs[f] = []

kust = docs.pop("kustomization.yaml", [{}])[0]
check("the kustomization lists every manifest", sorted(kust.get("resources", [])) == sorted(docs),
      "%s vs %s" % (kust.get("resources"), sorted(docs)))

objs = [d for ds in docs.values() for d in ds]
by_kind = {}
for o in objs:
    ok = all(k in o for k in ("apiVersion", "kind", "metadata")) and o["metadata"].get("name")
    if o.get("kind") != "Namespace":
        ok = ok and o["metadata"].get("namespace") == "sluice-system"
    check("%s %s has apiVersion, kind, name and namespace" % (o.get("kind"), o.get("metadata", {}).get("name")), bool(ok), o)
    by_kind.setdefault(o.get("kind"), {})[o["metadata"]["name"]] = o

check("the namespace allows privileged pods", by_kind.get("Namespace", {}).get("sluice-system", {})
      .get("metadata", {}).get("labels", {}).get("pod-security.kubernetes.io/enforce") == "privileged")
sa = by_kind.get("ServiceAccount", {}).get("sluiced")
check("the ServiceAccount exists and gets no API token", sa is not None and sa.get("automountServiceAccountToken") is False)
for rb in by_kind.get("RoleBinding", {}).values():
    check("RoleBinding %s names a defined Role" % rb["metadata"]["name"],
          rb["roleRef"]["kind"] == "Role" and rb["roleRef"]["name"] in by_kind.get("Role", {}))

ds = by_kind.get("DaemonSet", {}).get("sluiced")
check("the DaemonSet exists", ds is not None)
spec = ds["spec"]
tmpl = spec["template"]
pod = tmpl["spec"]
sel = spec["selector"]["matchLabels"]
check("its selector matches its template's labels", all(tmpl["metadata"]["labels"].get(k) == v for k, v in sel.items()))
check("it runs sluiced in the host network", pod.get("hostNetwork") is True)
check("its ServiceAccount is the defined one, without a token",
      pod.get("serviceAccountName") in by_kind.get("ServiceAccount", {}) and pod.get("automountServiceAccountToken") is False)
vols = {v["name"]: v for v in pod["volumes"]}
for c in pod.get("initContainers", []) + pod["containers"]:
    check("container %s has a name and an image" % c.get("name"), bool(c.get("name")) and bool(c.get("image")))
    missing = [m["name"] for m in c.get("volumeMounts", []) if m["name"] not in vols]
    check("container %s mounts only defined volumes" % c["name"], not missing, missing)
for v in vols.values():
    if "configMap" in v:
        check("volume %s names a defined ConfigMap" % v["name"], v["configMap"]["name"] in by_kind.get("ConfigMap", {}))
host = {v["hostPath"]["path"] for v in vols.values() if "hostPath" in v}
check("the node's CNI directories, /run/sluice and the audit log are host paths",
      {"/opt/cni/bin", "/etc/cni/net.d", "/run/sluice", "/var/log/sluice"} <= host, host)
sluiced = [c for c in pod["containers"] if c["name"] == "sluiced"][0]
args = dict(a[2:].split("=", 1) for a in sluiced["args"])
check("sluiced's control socket is where the plugin looks (/run/sluice)", args.get("run-dir") == "/run/sluice")
check("sluiced's metrics listen on loopback only", args.get("metrics-listen", "").startswith("127."))

org = by_kind["ConfigMap"]["sluice-org-policy"]["data"]["policy.json"]
tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), "k8s-org-policy-%d.json" % os.getpid())
with open(tmp, "w") as fh:
    fh.write(org)
r = subprocess.run([os.path.join(BUILD, "tools", "sluicectl", "sluicectl"), "policy", "check", "--layer", "org", tmp],
                   capture_output=True, text=True)
os.unlink(tmp)
check("the organisation policy passes sluicectl policy check --layer org", r.returncode == 0, r.stdout + r.stderr)

conflist = json.loads(by_kind["ConfigMap"]["sluice-cni-config"]["data"]["10-sluice.conflist"])
check("the conflist is CNI 1.0.0 with sluice-cni first in its chain",
      conflist.get("cniVersion") == "1.0.0" and conflist["plugins"][0]["type"] == "sluice-cni", conflist)
conf = dict(conflist["plugins"][0], cniVersion=conflist["cniVersion"], name=conflist["name"],
            runDir="/nonexistent-sluice-run")
for ns in ["default"] + list(conf.get("namespaces", {})):
    env = dict(os.environ, CNI_COMMAND="ADD", CNI_CONTAINERID="k8stest", CNI_IFNAME="eth0",
               CNI_NETNS="/proc/self/ns/net", CNI_ARGS="K8S_POD_NAMESPACE=%s;K8S_POD_NAME=p" % ns)
    r = subprocess.run([os.path.join(BUILD, "cni", "sluice-cni")], input=json.dumps(conf), env=env,
                       capture_output=True, text=True)
    try:
        out = json.loads(r.stdout)
    except ValueError:
        out = {}
    check("sluice-cni parses the conflist and compiles the policy of namespace %s (stops at: no sluiced)" % ns,
          out.get("code") == 100 and "not running" in out.get("msg", ""), r.stdout + r.stderr)

print("1..%d" % n)
sys.exit(1 if failed else 0)
