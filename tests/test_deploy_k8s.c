/* The Kubernetes manifests of etc/k8s: every file parsed (the project's YAML tree on libyaml)
 * and checked against its kind's required fields and against each other (selectors, probe
 * ports, GPU resources, the ConfigMaps' files read by the project's loaders); kubectl kustomize
 * (offline) when kubectl is installed. Each check returns what is wrong, so bad copies fail. */
#include "cluster_util.h"
#include "common/config.h"
#include "common/util.h"
#include "common/yaml_tree.h"

#include <criterion/criterion.h>

#define S_K8S PL_SOURCE_DIR "/etc/k8s"
#define S_MAX_DOCS 16

typedef struct {
    char file[64];
    pl_yt_node_t *root;
} s_doc_t;

static s_doc_t s_docs[S_MAX_DOCS];
static int s_n_docs;
static char s_why[512];

static const pl_yt_node_t *s_get(const pl_yt_node_t *n, const char *key)
{
    if (!n || n->kind != PL_YT_MAP)
        return NULL;
    for (size_t i = 0; i + 1 < n->n_kids; i += 2)
        if (n->kids[i]->kind == PL_YT_SCALAR && strcmp(n->kids[i]->value, key) == 0)
            return n->kids[i + 1];
    return NULL;
}

/* "a.b.c" through mappings. */
static const pl_yt_node_t *s_path(const pl_yt_node_t *n, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *save, *k = strtok_r(buf, ".", &save); k && n; k = strtok_r(NULL, ".", &save))
        n = s_get(n, k);
    return n;
}

static const char *s_str(const pl_yt_node_t *n, const char *path)
{
    n = s_path(n, path);
    return n && n->kind == PL_YT_SCALAR && n->len ? n->value : NULL;
}

/* A scalar under one key, which may hold dots ("nvidia.com/gpu"). */
static const char *s_key(const pl_yt_node_t *n, const char *key)
{
    n = s_get(n, key);
    return n && n->kind == PL_YT_SCALAR && n->len ? n->value : NULL;
}

#define S_FAIL(...) (snprintf(s_why, sizeof(s_why), __VA_ARGS__), s_why)

/* Every key of `want` (a mapping of scalars) has the same value in `have`. */
static int s_labels_match(const pl_yt_node_t *want, const pl_yt_node_t *have)
{
    if (!want || want->kind != PL_YT_MAP || !want->n_kids)
        return 0;
    for (size_t i = 0; i + 1 < want->n_kids; i += 2) {
        const pl_yt_node_t *v = s_get(have, want->kids[i]->value); /* keys hold dots */
        if (!v || v->kind != PL_YT_SCALAR || strcmp(v->value, want->kids[i + 1]->value) != 0)
            return 0;
    }
    return 1;
}

static const pl_yt_node_t *s_find(const char *kind, const char *name)
{
    for (int i = 0; i < s_n_docs; i++)
        if (strcmp(s_str(s_docs[i].root, "kind"), kind) == 0 &&
            (!name || strcmp(s_str(s_docs[i].root, "metadata.name"), name) == 0))
            return s_docs[i].root;
    return NULL;
}

/* The HTTP port the file of a ConfigMap sets (cluster.yaml: coordinator.http, pipeld.yaml:
 * http), read by the project's own loaders; 0 and s_why set when it is not valid. */
static int s_configmap_port(const pl_yt_node_t *cm)
{
    const pl_yt_node_t *data = s_get(cm, "data");
    for (size_t i = 0; data && i + 1 < data->n_kids; i += 2) {
        const char *key = data->kids[i]->value;
        const pl_yt_node_t *v = data->kids[i + 1];
        if (strcmp(key, "cluster.yaml") == 0) {
            static pl_cfg_cluster_t cl;
            if (pl_cfg_cluster_parse(v->value, v->len, key, &cl))
                return S_FAIL("ConfigMap %s: %s", s_str(cm, "metadata.name"), pl_error_msg()), 0;
            return cl.http.port;
        }
        if (strcmp(key, "pipeld.yaml") == 0) {
            static pl_cfg_node_t node;
            if (pl_cfg_node_parse(v->value, v->len, key, &node))
                return S_FAIL("ConfigMap %s: %s", s_str(cm, "metadata.name"), pl_error_msg()), 0;
            return node.http.port;
        }
    }
    S_FAIL("ConfigMap %s: no cluster.yaml or pipeld.yaml", s_str(cm, "metadata.name"));
    return 0;
}

static const char *s_check_probe(const pl_yt_node_t *c, const char *probe, const char *path,
                                 int port)
{
    const pl_yt_node_t *p = s_get(c, probe);
    const char *got = s_str(p, "httpGet.path"), *gport = s_str(p, "httpGet.port");
    if (!got || strcmp(got, path) != 0)
        return S_FAIL("%s: httpGet.path %s, expected %s", probe, got ? got : "missing", path);
    if (!gport || atoi(gport) != port)
        return S_FAIL("%s: port %s, but the config serves HTTP on %d", probe,
                      gport ? gport : "missing", port);
    return NULL;
}

/* A Deployment or DaemonSet: selector matches the template's labels, one container at least,
 * each with a name and an image; the first has /livez and /readyz probes on the HTTP port of
 * the ConfigMap it mounts; a DaemonSet limits a GPU resource. NULL when all is well. */
static const char *s_check_workload(const pl_yt_node_t *w)
{
    const char *kind = s_str(w, "kind");
    const pl_yt_node_t *sel = s_path(w, "spec.selector.matchLabels");
    const pl_yt_node_t *labels = s_path(w, "spec.template.metadata.labels");
    if (!s_labels_match(sel, labels))
        return S_FAIL("spec.selector.matchLabels does not match spec.template.metadata.labels");
    const pl_yt_node_t *cs = s_path(w, "spec.template.spec.containers");
    if (!cs || cs->kind != PL_YT_SEQ || !cs->n_kids)
        return S_FAIL("spec.template.spec.containers: none");
    for (size_t i = 0; i < cs->n_kids; i++)
        if (!s_str(cs->kids[i], "name") || !s_str(cs->kids[i], "image"))
            return S_FAIL("containers[%zu]: name and image are required", i);
    const pl_yt_node_t *c = cs->kids[0];

    const char *cm_name = NULL;
    const pl_yt_node_t *vols = s_path(w, "spec.template.spec.volumes");
    for (size_t i = 0; vols && i < vols->n_kids; i++)
        if ((cm_name = s_str(vols->kids[i], "configMap.name")))
            break;
    const pl_yt_node_t *cm = cm_name ? s_find("ConfigMap", cm_name) : NULL;
    if (!cm)
        return S_FAIL("mounts no ConfigMap of etc/k8s (%s)", cm_name ? cm_name : "none");
    int port = s_configmap_port(cm);
    if (!port)
        return s_why[0] ? s_why : S_FAIL("ConfigMap %s: no http port", cm_name);
    const char *why;
    if ((why = s_check_probe(c, "livenessProbe", "/livez", port)) ||
        (why = s_check_probe(c, "readinessProbe", "/readyz", port)))
        return why;
    int listed = 0;
    const pl_yt_node_t *ports = s_get(c, "ports");
    for (size_t i = 0; ports && i < ports->n_kids; i++) {
        const char *p = s_str(ports->kids[i], "containerPort");
        listed |= p && atoi(p) == port;
    }
    if (!listed)
        return S_FAIL("containerPort %d is not listed", port);

    if (strcmp(kind, "DaemonSet") == 0) {
        const pl_yt_node_t *lim = s_path(c, "resources.limits");
        const char *nv = s_key(lim, "nvidia.com/gpu"), *amd = s_key(lim, "amd.com/gpu");
        const char *n = nv ? nv : amd;
        if (!n || (nv && amd) || atoi(n) < 1)
            return S_FAIL("resources.limits must name nvidia.com/gpu or amd.com/gpu (>= 1)");
    } else {
        const char *r = s_str(w, "spec.replicas");
        if (!r || strcmp(r, "1") != 0)
            return S_FAIL("spec.replicas must be 1 (one coordinator owns the state)");
    }
    return NULL;
}

/* A Service selects a Deployment's pods and targets ports its container lists. */
static const char *s_check_service(const pl_yt_node_t *svc)
{
    const pl_yt_node_t *sel = s_path(svc, "spec.selector");
    for (int i = 0; i < s_n_docs; i++) {
        const pl_yt_node_t *d = s_docs[i].root;
        if (strcmp(s_str(d, "kind"), "Deployment") != 0 ||
            !s_labels_match(sel, s_path(d, "spec.template.metadata.labels")))
            continue;
        const pl_yt_node_t *ports = s_path(svc, "spec.ports");
        const pl_yt_node_t *cports =
            s_get(s_path(d, "spec.template.spec.containers")->kids[0], "ports");
        if (!ports || !ports->n_kids)
            return S_FAIL("spec.ports: none");
        for (size_t p = 0; p < ports->n_kids; p++) {
            const char *t = s_str(ports->kids[p], "targetPort");
            int ok = 0;
            for (size_t q = 0; t && cports && q < cports->n_kids; q++)
                ok |= strcmp(s_str(cports->kids[q], "containerPort"), t) == 0;
            if (!ok)
                return S_FAIL("targetPort %s is no containerPort of %s", t ? t : "missing",
                              s_str(d, "metadata.name"));
        }
        return NULL;
    }
    return S_FAIL("spec.selector selects no Deployment of etc/k8s");
}

static const char *s_check(const pl_yt_node_t *d)
{
    s_why[0] = 0;
    const char *api = s_str(d, "apiVersion"), *kind = s_str(d, "kind");
    if (!api || !kind || !s_str(d, "metadata.name"))
        return S_FAIL("apiVersion, kind and metadata.name are required");
    if (!strcmp(kind, "ConfigMap"))
        return strcmp(api, "v1") ? S_FAIL("ConfigMap is v1") : s_configmap_port(d) ? NULL : s_why;
    if (!strcmp(kind, "Service"))
        return strcmp(api, "v1") ? S_FAIL("Service is v1") : s_check_service(d);
    if (!strcmp(kind, "Deployment") || !strcmp(kind, "DaemonSet"))
        return strcmp(api, "apps/v1") ? S_FAIL("%s is apps/v1", kind) : s_check_workload(d);
    return S_FAIL("unexpected kind %s", kind);
}

static void s_load(const char *file, const char *text)
{
    cr_assert_lt(s_n_docs, S_MAX_DOCS);
    s_doc_t *d = &s_docs[s_n_docs];
    snprintf(d->file, sizeof(d->file), "%s", file);
    cr_assert_eq(pl_yt_load(text, strlen(text), file, 32, &d->root), PL_OK, "%s", pl_error_msg());
    s_n_docs++;
}

static void s_setup(void)
{
    char *list = NULL;
    cr_assert_eq(tc_sh(&list, "cd '%s' && ls *.yaml | grep -v '^kustomization.yaml$'", S_K8S), 0);
    for (char *save, *f = strtok_r(list, "\n", &save); f; f = strtok_r(NULL, "\n", &save)) {
        char *text = NULL;
        cr_assert_eq(tc_sh(&text, "cat '%s/%s'", S_K8S, f), 0);
        s_load(f, text);
        free(text);
    }
    free(list);
}

static void s_teardown(void)
{
    for (int i = 0; i < s_n_docs; i++)
        pl_yt_free(&s_docs[i].root);
    s_n_docs = 0;
}

TestSuite(k8s, .init = s_setup, .fini = s_teardown);

Test(k8s, every_manifest_passes_its_kind)
{
    int kinds[4] = {0}; /* ConfigMap, Deployment, Service, DaemonSet */
    static const char *const names[] = {"ConfigMap", "Deployment", "Service", "DaemonSet"};
    for (int i = 0; i < s_n_docs; i++) {
        const char *why = s_check(s_docs[i].root);
        cr_assert_null(why, "%s: %s", s_docs[i].file, why);
        for (int k = 0; k < 4; k++)
            kinds[k] += strcmp(s_str(s_docs[i].root, "kind"), names[k]) == 0;
    }
    cr_assert_eq(kinds[0], 2, "a ConfigMap for the cluster file and one for the node file");
    cr_assert_eq(kinds[1], 1);
    cr_assert_eq(kinds[2], 1);
    cr_assert_eq(kinds[3], 2, "a DaemonSet per GPU vendor");
    const pl_yt_node_t *nv = s_find("DaemonSet", "pipeld-nvidia");
    const pl_yt_node_t *amd = s_find("DaemonSet", "pipeld-amd");
    cr_assert(nv && amd);
    const pl_yt_node_t *c = s_path(nv, "spec.template.spec.containers")->kids[0];
    cr_assert_not_null(s_key(s_path(c, "resources.limits"), "nvidia.com/gpu"));
    c = s_path(amd, "spec.template.spec.containers")->kids[0];
    cr_assert_not_null(s_key(s_path(c, "resources.limits"), "amd.com/gpu"));
}

/* Mutated copies: each is caught and the reason says what. */
static void s_broken(const char *file, const char *from, const char *to, const char *expect)
{
    char *text = NULL;
    cr_assert_eq(tc_sh(&text, "sed 's|%s|%s|' '%s/%s'", from, to, S_K8S, file), 0);
    pl_yt_node_t *root = NULL;
    cr_assert_eq(pl_yt_load(text, strlen(text), file, 32, &root), PL_OK, "%s", pl_error_msg());
    free(text);
    const char *why = s_check(root);
    cr_assert_not_null(why, "%s with '%s' -> '%s' passed", file, from, to);
    cr_assert(strstr(why, expect), "%s: '%s' does not say '%s'", file, why, expect);
    pl_yt_free(&root);
}

Test(k8s, broken_copies_fail)
{
    s_broken("pipeld-nvidia.yaml", "^      pipeld.io/gpu: nvidia", "      pipeld.io/gpu: amd",
             "does not match");
    s_broken("pipeld-nvidia.yaml", "path: /readyz", "path: /healthz", "/readyz");
    s_broken("pipeld-nvidia.yaml", "port: 9101", "port: 9102", "serves HTTP on 9101");
    s_broken("pipeld-amd.yaml", "amd.com/gpu: 1", "cpu: 1", "amd.com/gpu");
    s_broken("pipeld-amd.yaml", "image: ", "imagex: ", "image are required");
    s_broken("pipecoord-deployment.yaml", "replicas: 1", "replicas: 2", "replicas");
    s_broken("pipecoord-deployment.yaml", "^kind: Deployment", "kind: Pod", "unexpected kind");
    s_broken("pipecoord-service.yaml", "targetPort: 9100", "targetPort: 9200", "targetPort 9200");
    s_broken("pipecoord-service.yaml", "^  name: pipecoord", "  nam: pipecoord", "metadata.name");
    s_broken("configmap-cluster.yaml", "log_format: json", "log_format: xml", "log_format");
    s_broken("configmap-node.yaml", "port: 9101", "port: 99999", "http.port");
}

/* kustomization.yaml lists exactly the manifests, and kubectl builds them (no cluster). */
Test(k8s, kustomization_builds)
{
    char *res = NULL, *files = NULL;
    cr_assert_eq(tc_sh(&res, "sed -n 's/^  - //p' '%s/kustomization.yaml' | sort", S_K8S), 0);
    cr_assert_eq(
        tc_sh(&files, "cd '%s' && ls *.yaml | grep -v '^kustomization.yaml$' | sort", S_K8S), 0);
    cr_assert_str_eq(res, files);
    free(res);
    free(files);
    if (tc_sh(NULL, "command -v kubectl >/dev/null 2>&1"))
        cr_skip_test("kubectl is not installed: the manifests were checked above, not built");
    char *out = NULL;
    int rc = tc_sh(&out, "KUBECONFIG=/dev/null timeout 60 kubectl kustomize '%s' 2>&1", S_K8S);
    cr_assert_eq(rc, 0, "kubectl kustomize: %s", out);
    cr_assert(strstr(out, "kind: DaemonSet") && strstr(out, "name: pipeld-amd"), "%s", out);
    free(out);
}
