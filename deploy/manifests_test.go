package deploy_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const k8sDir = "k8s"

// The drain of a worker after SIGTERM, beyond --shutdown-timeout: asynq's
// re-queue margin (3 s) plus the wait for the cut handlers (20 s), see
// worker/drain.go and worker.Stop. terminationGracePeriodSeconds and
// stop_grace_period must cover timeout + margin + the warm pool's removal.
const drainOverhead = 23 * time.Second

// --- typed objects that k8s.io/api does not vendor ------------------------

// kustomization covers the fields of kustomize.config.k8s.io Kustomization
// and Component that these manifests use; any other field fails decoding.
type kustomization struct {
	metav1.TypeMeta    `json:",inline"`
	Namespace          string         `json:"namespace,omitempty"`
	Labels             []kLabel       `json:"labels,omitempty"`
	Resources          []string       `json:"resources,omitempty"`
	Components         []string       `json:"components,omitempty"`
	Patches            []kPatch       `json:"patches,omitempty"`
	Images             []kImage       `json:"images,omitempty"`
	ConfigMapGenerator []kGenerator   `json:"configMapGenerator,omitempty"`
	SecretGenerator    []kGenerator   `json:"secretGenerator,omitempty"`
	GeneratorOptions   map[string]any `json:"generatorOptions,omitempty"`
}

type kLabel struct {
	Pairs            map[string]string `json:"pairs"`
	IncludeSelectors bool              `json:"includeSelectors,omitempty"`
	IncludeTemplates bool              `json:"includeTemplates,omitempty"`
}

type kPatch struct {
	Path   string `json:"path,omitempty"`
	Patch  string `json:"patch,omitempty"`
	Target *struct {
		Group   string `json:"group,omitempty"`
		Version string `json:"version,omitempty"`
		Kind    string `json:"kind,omitempty"`
		Name    string `json:"name,omitempty"`
	} `json:"target,omitempty"`
}

type kImage struct {
	Name    string `json:"name"`
	NewName string `json:"newName,omitempty"`
	NewTag  string `json:"newTag,omitempty"`
	Digest  string `json:"digest,omitempty"`
}

type kGenerator struct {
	Name     string   `json:"name"`
	Behavior string   `json:"behavior,omitempty"`
	Envs     []string `json:"envs,omitempty"`
	Files    []string `json:"files,omitempty"`
	Literals []string `json:"literals,omitempty"`
}

// scaledObject is the part of KEDA's keda.sh/v1alpha1 ScaledObject that
// these manifests use (KEDA 2.x field names).
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion             string `json:"apiVersion,omitempty"`
			Kind                   string `json:"kind,omitempty"`
			Name                   string `json:"name"`
			EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
		} `json:"scaleTargetRef"`
		PollingInterval       *int32 `json:"pollingInterval,omitempty"`
		InitialCooldownPeriod *int32 `json:"initialCooldownPeriod,omitempty"`
		CooldownPeriod        *int32 `json:"cooldownPeriod,omitempty"`
		IdleReplicaCount      *int32 `json:"idleReplicaCount,omitempty"`
		MinReplicaCount       *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount       *int32 `json:"maxReplicaCount,omitempty"`
		Fallback              *struct {
			FailureThreshold int32 `json:"failureThreshold"`
			Replicas         int32 `json:"replicas"`
		} `json:"fallback,omitempty"`
		Advanced *struct {
			RestoreToOriginalReplicaCount bool `json:"restoreToOriginalReplicaCount,omitempty"`
			HorizontalPodAutoscalerConfig *struct {
				Name     string                                         `json:"name,omitempty"`
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []struct {
			Type              string            `json:"type"`
			Name              string            `json:"name,omitempty"`
			UseCachedMetrics  bool              `json:"useCachedMetrics,omitempty"`
			MetricType        string            `json:"metricType,omitempty"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind,omitempty"`
			} `json:"authenticationRef,omitempty"`
		} `json:"triggers"`
	} `json:"spec"`
}

// kedaMetadataKeys are the metadata keys KEDA's scalers read; KEDA ignores
// any other key silently, so a typo would disable a setting unnoticed.
var kedaMetadataKeys = map[string][]string{
	"redis": {"address", "addressFromEnv", "host", "hostFromEnv", "port", "portFromEnv",
		"username", "usernameFromEnv", "password", "passwordFromEnv", "databaseIndex",
		"enableTLS", "unsafeSsl", "listName", "listLength", "activationListLength"},
	"prometheus": {"serverAddress", "query", "queryParameters", "threshold", "activationThreshold",
		"namespace", "customHeaders", "ignoreNullValues", "unsafeSsl", "authModes", "timeout"},
}

// --- decoding --------------------------------------------------------------

// object is one decoded manifest.
type object struct {
	file string
	kind string
	name string
	obj  any
}

// newObject returns a pointer to the typed object for apiVersion/kind.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Secret":
		return &corev1.Secret{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "v1 Namespace":
		return &corev1.Namespace{}, nil
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, nil
	case "keda.sh/v1alpha1 ScaledObject":
		return &scaledObject{}, nil
	case "keda.sh/v1alpha1 TriggerAuthentication":
		return &triggerAuthentication{}, nil
	case "kustomize.config.k8s.io/v1beta1 Kustomization", "kustomize.config.k8s.io/v1alpha1 Component":
		return &kustomization{}, nil
	}
	return nil, fmt.Errorf("no typed decoder for apiVersion %q kind %q: add one to newObject", apiVersion, kind)
}

// splitDocs splits a multi-document YAML stream, dropping empty documents.
func splitDocs(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(data), -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func stripComments(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// decodeStrict decodes every document of data into its typed object:
// sigs.k8s.io/yaml turns YAML into JSON and decodes it with unknown and
// duplicate fields as errors.
func decodeStrict(file string, data []byte) ([]object, error) {
	var out []object
	for i, doc := range splitDocs(data) {
		var tm struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return out, fmt.Errorf("%s doc %d: %w", file, i+1, err)
		}
		if filepath.Base(file) == "kustomization.yaml" && tm.APIVersion == "" {
			return out, fmt.Errorf("%s: set apiVersion and kind (a kustomization without them is not checked)", file)
		}
		obj, err := newObject(tm.APIVersion, tm.Kind)
		if err != nil {
			return out, fmt.Errorf("%s doc %d: %w", file, i+1, err)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return out, fmt.Errorf("%s doc %d (%s %s): %w", file, i+1, tm.Kind, tm.Metadata.Name, err)
		}
		out = append(out, object{file: file, kind: tm.Kind, name: tm.Metadata.Name, obj: obj})
	}
	return out, nil
}

// TestManifestsDecodeStrictly decodes every YAML file under k8s/ (resources,
// patches, kustomizations) into its typed object.
func TestManifestsDecodeStrictly(t *testing.T) {
	t.Parallel()
	var files []string
	require.NoError(t, filepath.WalkDir(k8sDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, path)
		}
		return err
	}))
	require.NotEmpty(t, files)
	kinds := map[string]int{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		objs, err := decodeStrict(f, data)
		assert.NoError(t, err)
		for _, o := range objs {
			kinds[o.kind]++
		}
	}
	for _, k := range []string{"Kustomization", "Component", "Deployment", "StatefulSet", "Service",
		"ServiceAccount", "PodDisruptionBudget", "ScaledObject", "NetworkPolicy", "TriggerAuthentication"} {
		assert.Positive(t, kinds[k], "no %s decoded", k)
	}
	t.Logf("%d files decoded strictly: %v", len(files), kinds)
}

// A misspelled field must fail: the decoder is really strict.
func TestDecodeStrictRejectsUnknownFields(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"deployment": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      containers:\n        - name: c\n          imagePullPolicyy: Always\n",
		"pdb":        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\nspec: {maxUnavailabel: 1}\n",
		"keda":       "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec: {scaleTargetRef: {name: x}, triggers: [], minReplicas: 1}\n",
		"kedaauth":   "apiVersion: keda.sh/v1alpha1\nkind: TriggerAuthentication\nmetadata: {name: x}\nspec: {secretTargetRefs: []}\n",
		"netpol":     "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: x}\nspec: {podSelector: {}, ingres: []}\n",
		"kustomize":  "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresource: [a.yaml]\n",
		"duplicate":  "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {type: ClusterIP, type: NodePort}\n",
		"unknown":    "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n",
	} {
		_, err := decodeStrict(name+".yaml", []byte(doc))
		assert.Error(t, err, name)
	}
}

// --- kustomize build -------------------------------------------------------

// built is the output of `kubectl kustomize DIR`, decoded.
type built struct {
	dir  string
	objs []object
}

func (b *built) all(kind string) []object {
	var out []object
	for _, o := range b.objs {
		if o.kind == kind {
			out = append(out, o)
		}
	}
	return out
}

func (b *built) get(kind, name string) any {
	for _, o := range b.objs {
		if o.kind == kind && o.name == name {
			return o.obj
		}
	}
	return nil
}

// configMap finds a generated ConfigMap by its name without the hash suffix.
func (b *built) configMap(prefix string) *corev1.ConfigMap {
	for _, o := range b.all("ConfigMap") {
		if o.name == prefix || strings.HasPrefix(o.name, prefix+"-") {
			return o.obj.(*corev1.ConfigMap)
		}
	}
	return nil
}

func kustomizeBuild(t *testing.T, dir string) *built {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	require.NoError(t, err, "kubectl not found: it builds the kustomize overlays (the machine image has it; "+
		"else install kubectl >= 1.27, which embeds kustomize v5)")
	var stderr bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "kubectl kustomize %s: %s", dir, stderr.String())
	objs, err := decodeStrict(dir+" (built)", out)
	require.NoError(t, err)
	return &built{dir: dir, objs: objs}
}

// TestOverlaysBuild builds every overlay (and the base, deps) and checks
// that the parts fit together.
func TestOverlaysBuild(t *testing.T) {
	t.Parallel()
	overlays, err := filepath.Glob(filepath.Join(k8sDir, "overlays", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, overlays)
	for _, dir := range append([]string{filepath.Join(k8sDir, "base"), filepath.Join(k8sDir, "deps")}, overlays...) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			b := kustomizeBuild(t, dir)
			if strings.Contains(dir, "overlays") {
				checkOverlay(t, b)
			}
			if !strings.Contains(dir, "base") {
				checkSharedServicesAuth(t, b) // auth_test.go
			}
			checkWorkloads(t, b)
		})
	}
}

// workload is a Deployment's or StatefulSet's pod template.
type workload struct {
	kind, name string
	grace      *int64
	labels     map[string]string
	pod        *corev1.PodSpec
}

func workloads(b *built) []workload {
	var out []workload
	for _, o := range b.objs {
		switch w := o.obj.(type) {
		case *appsv1.Deployment:
			out = append(out, workload{o.kind, o.name, w.Spec.Template.Spec.TerminationGracePeriodSeconds, w.Spec.Template.Labels, &w.Spec.Template.Spec})
		case *appsv1.StatefulSet:
			out = append(out, workload{o.kind, o.name, w.Spec.Template.Spec.TerminationGracePeriodSeconds, w.Spec.Template.Labels, &w.Spec.Template.Spec})
		}
	}
	return out
}

// checkWorkloads: every container has requests and a memory limit, drops
// its capabilities unless privileged on purpose, reads $(VAR)s defined
// before it, and mounts only volumes the pod defines (checked on complete
// pods: the base alone lacks the engine's volumes by design).
func checkWorkloads(t *testing.T, b *built) {
	for _, w := range workloads(b) {
		volumes := map[string]bool{}
		for _, v := range w.pod.Volumes {
			volumes[v.Name] = true
		}
		for _, pvc := range stsClaims(b, w) {
			volumes[pvc] = true
		}
		containers := append(slices.Clone(w.pod.InitContainers), w.pod.Containers...)
		for _, c := range containers {
			where := fmt.Sprintf("%s %s container %s", w.kind, w.name, c.Name)
			assert.NotEmpty(t, c.Image, where)
			assert.NotNil(t, c.Resources.Requests.Memory(), where)
			assert.False(t, c.Resources.Limits.Memory().IsZero(), "%s: no memory limit", where)
			sc := c.SecurityContext
			// The DinD engine is root with every capability on purpose:
			// privileged, or under Sysbox a root confined to a user namespace.
			if assert.NotNil(t, sc, "%s: no securityContext", where) && c.Name != "engine" {
				{
					assert.Equal(t, []corev1.Capability{"ALL"}, capDrop(sc), "%s: drop ALL capabilities", where)
					if assert.NotNil(t, sc.AllowPrivilegeEscalation, where) {
						assert.False(t, *sc.AllowPrivilegeEscalation, where)
					}
				}
			}
			defined := map[string]bool{}
			for _, e := range c.Env {
				for _, ref := range regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).FindAllStringSubmatch(e.Value, -1) {
					assert.True(t, defined[ref[1]], "%s: env %s uses $(%s) before it is defined", where, e.Name, ref[1])
				}
				defined[e.Name] = true
			}
			if strings.Contains(b.dir, "base") {
				continue
			}
			for _, m := range c.VolumeMounts {
				assert.True(t, volumes[m.Name], "%s mounts undefined volume %q", where, m.Name)
			}
		}
	}
}

func stsClaims(b *built, w workload) []string {
	var out []string
	if ss, ok := b.get("StatefulSet", w.name).(*appsv1.StatefulSet); ok && w.kind == "StatefulSet" {
		for _, c := range ss.Spec.VolumeClaimTemplates {
			out = append(out, c.Name)
		}
	}
	return out
}

func capDrop(sc *corev1.SecurityContext) []corev1.Capability {
	if sc.Capabilities == nil {
		return nil
	}
	return sc.Capabilities.Drop
}

func container(pod *corev1.PodSpec, name string) *corev1.Container {
	for i := range pod.InitContainers {
		if pod.InitContainers[i].Name == name {
			return &pod.InitContainers[i]
		}
	}
	for i := range pod.Containers {
		if pod.Containers[i].Name == name {
			return &pod.Containers[i]
		}
	}
	return nil
}

func envValue(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// checkOverlay checks a complete deployment.
func checkOverlay(t *testing.T, b *built) {
	cm := b.configMap("paddock-config")
	require.NotNil(t, cm, "no paddock-config ConfigMap")
	metricsPort := portOf(t, cm.Data["PADDOCK_METRICS_ADDR"])
	shutdown, err := time.ParseDuration(cm.Data["PADDOCK_SHUTDOWN_TIMEOUT"])
	require.NoError(t, err, "PADDOCK_SHUTDOWN_TIMEOUT")

	for _, name := range []string{"paddock-scheduler", "paddock-worker"} {
		d, ok := b.get("Deployment", name).(*appsv1.Deployment)
		require.True(t, ok, "no Deployment %s", name)
		// Probes: /healthz (startup, liveness) and /readyz (readiness) on the
		// port that PADDOCK_METRICS_ADDR opens.
		checkPaddockDeployment(t, b, cm, d, "metrics", metricsPort, "/readyz")
	}

	// The worker: grace above the drain, an engine, the init where the
	// engine finds it.
	wd := b.get("Deployment", "paddock-worker").(*appsv1.Deployment)
	pod := &wd.Spec.Template.Spec
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	assert.Greater(t, grace, shutdown+drainOverhead, "terminationGracePeriodSeconds %s must exceed --shutdown-timeout %s + %s", grace, shutdown, drainOverhead)
	w := container(pod, "worker")
	dockerHost, _ := envValue(w, "DOCKER_HOST")
	require.True(t, strings.HasPrefix(dockerHost, "unix://"), "DOCKER_HOST %q", dockerHost)
	assertMountedPath(t, w, strings.TrimPrefix(dockerHost, "unix://"), "worker: the engine socket")
	initPath, _ := envValue(w, "PADDOCK_INIT_PATH")
	require.NotEmpty(t, initPath, "worker: PADDOCK_INIT_PATH")
	initDir := filepath.Dir(initPath)
	assertMountedPath(t, w, initDir, "worker: the init")
	runDir, _ := envValue(w, "PADDOCK_RUN_DIR")
	require.NotEmpty(t, runDir, "worker: PADDOCK_RUN_DIR")
	assertMountedPath(t, w, runDir, "worker: the sandboxes' control sockets")
	if engine := container(pod, "engine"); engine != nil {
		// Docker-in-Docker: the engine resolves bind sources in its own
		// filesystem: the init must be at the same path there.
		assertMountedPath(t, engine, initDir, "engine: the init")
		assertMountedPath(t, engine, runDir, "engine: the control sockets")
		// The engine's memory holds every sandbox at its cap at once.
		conc, _ := strconv.Atoi(cm.Data["PADDOCK_CONCURRENCY"])
		maxMB, _ := strconv.Atoi(cm.Data["PADDOCK_MAX_MEMORY_MB"])
		if lim, ok := engine.Resources.Limits[corev1.ResourceMemory]; assert.True(t, ok, "engine: a memory limit") {
			assert.GreaterOrEqual(t, lim.Value(), int64(conc*maxMB)<<20+512<<20,
				"engine memory %s < PADDOCK_CONCURRENCY %d x PADDOCK_MAX_MEMORY_MB %d + 512 MiB", lim.String(), conc, maxMB)
		}
		assert.Contains(t, engine.Args, "--host="+dockerHost, "engine listens where DOCKER_HOST points")
		assert.Equal(t, corev1.ContainerRestartPolicyAlways, *engine.RestartPolicy, "engine is a native sidecar")
		assert.NotNil(t, engine.StartupProbe, "engine: a startup probe gates the next init containers")
	} else {
		// The node's engine: the init directory is a hostPath at the same path.
		found := false
		for _, v := range pod.Volumes {
			if v.HostPath != nil && strings.HasPrefix(initDir, v.HostPath.Path) {
				found = true
			}
		}
		assert.True(t, found, "worker: %s must be a hostPath for the node's engine", initDir)
		found = false
		for _, v := range pod.Volumes {
			if v.HostPath != nil && strings.HasPrefix(runDir, v.HostPath.Path) {
				found = true
			}
		}
		assert.True(t, found, "worker: %s must be a hostPath for the node's engine", runDir)
	}
	checkVolumeRoot(t, b, cm, pod, w)
	if ic := container(pod, "paddock-init"); assert.NotNil(t, ic, "an init container copies paddock-init") {
		assert.Equal(t, "paddock/paddock", imageName(ic.Image, b), "paddock-init comes from the worker's own image")
	}

	// Services select pods and name existing ports.
	for _, o := range b.all("Service") {
		svc := o.obj.(*corev1.Service)
		var target *workload
		for _, w := range workloads(b) {
			if selects(svc.Spec.Selector, w.labels) {
				target = &w
				break
			}
		}
		if !assert.NotNil(t, target, "Service %s selects no pods", svc.Name) {
			continue
		}
		for _, p := range svc.Spec.Ports {
			if p.TargetPort.StrVal == "" {
				continue
			}
			ok := false
			for _, c := range target.pod.Containers {
				for _, cp := range c.Ports {
					ok = ok || cp.Name == p.TargetPort.StrVal
				}
			}
			assert.True(t, ok, "Service %s: targetPort %q is no container port of %s", svc.Name, p.TargetPort.StrVal, target.name)
		}
	}

	// KEDA scales the worker Deployment on real asynq keys or metrics.
	sos := b.all("ScaledObject")
	require.Len(t, sos, 1, "one ScaledObject per overlay")
	so := sos[0].obj.(*scaledObject)
	assert.Equal(t, "paddock-worker", so.Spec.ScaleTargetRef.Name)
	assert.NotNil(t, b.get("Deployment", so.Spec.ScaleTargetRef.Name))
	require.NotEmpty(t, so.Spec.Triggers)
	queues := []string{"critical", "default", "low"} // the --queues default
	if q := cm.Data["PADDOCK_QUEUES"]; q != "" {
		queues = strings.Split(q, ",")
	}
	concurrency, _ := strconv.Atoi(cm.Data["PADDOCK_CONCURRENCY"])
	// Credentials and who reaches Redis (auth_test.go).
	checkKEDAAuth(t, b, so)
	checkServiceAuth(t, b, cm)
	checkRedisPolicies(t, b)
	checkGateway(t, b, cm)
	covered := map[string]bool{}
	for _, tr := range so.Spec.Triggers {
		allowed, ok := kedaMetadataKeys[tr.Type]
		require.True(t, ok, "trigger type %q has no metadata key list here", tr.Type)
		for k := range tr.Metadata {
			assert.Contains(t, allowed, k, "trigger %s: KEDA %s scaler has no metadata key %q", tr.Name, tr.Type, k)
		}
		switch tr.Type {
		case "redis":
			m := regexp.MustCompile(`^asynq:\{([^}]+)\}:(pending|active)$`).FindStringSubmatch(tr.Metadata["listName"])
			if assert.NotNil(t, m, "trigger %s: listName %q is no asynq v0.26 list (asynq:{QUEUE}:pending|active)", tr.Name, tr.Metadata["listName"]) {
				assert.Contains(t, queues, m[1], "trigger %s: queue", tr.Name)
				covered[m[2]+" "+m[1]] = true
				if m[2] == "active" {
					assert.Equal(t, strconv.Itoa(concurrency), tr.Metadata["listLength"], "trigger %s: active target = PADDOCK_CONCURRENCY", tr.Name)
				}
			}
			assert.Contains(t, tr.Metadata["address"], "redis."+namespaceOf(b)+".svc", "trigger %s: KEDA resolves the address from its own namespace", tr.Name)
		case "prometheus":
			for _, q := range queues { // the query sums over every queue
				covered["pending "+q], covered["active "+q] = true, true
			}
			assert.Contains(t, tr.Metadata["query"], "paddock_queue_pending")
			assert.Equal(t, strconv.Itoa(concurrency), tr.Metadata["threshold"], "threshold = PADDOCK_CONCURRENCY")
		}
	}
	// Work waiting or running in any queue scales the workers.
	for _, q := range queues {
		assert.True(t, covered["pending "+q], "no trigger on queue %s's pending tasks", q)
		assert.True(t, covered["active "+q], "no trigger on queue %s's active tasks", q)
	}
}

// checkPaddockDeployment checks what every Paddock Deployment d has: the
// paddock image, a container port portName = port, probes on it (/healthz
// for startup and liveness, readyPath for readiness), the shared ConfigMap
// and only optional secrets in its environment, a ServiceAccount of its own
// without an API token, and one PodDisruptionBudget.
func checkPaddockDeployment(t *testing.T, b *built, cm *corev1.ConfigMap, d *appsv1.Deployment, portName string, port int32, readyPath string) {
	t.Helper()
	name, pod := d.Name, &d.Spec.Template.Spec
	c := &pod.Containers[0]
	assert.Equal(t, "paddock/paddock", imageName(c.Image, b), "%s image", name)
	var got int32
	for _, p := range c.Ports {
		if p.Name == portName {
			got = p.ContainerPort
		}
	}
	assert.Equal(t, port, got, "%s: containerPort %s vs the address the service listens on", name, portName)
	for probe, path := range map[*corev1.Probe]string{c.StartupProbe: "/healthz", c.LivenessProbe: "/healthz", c.ReadinessProbe: readyPath} {
		if assert.NotNil(t, probe, "%s: missing probe for %s", name, path) && assert.NotNil(t, probe.HTTPGet, name) {
			assert.Equal(t, path, probe.HTTPGet.Path, name)
			assert.Equal(t, portName, probe.HTTPGet.Port.String(), name)
		}
	}
	// The config reaches the container, and only optional secrets.
	var hasConfig bool
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil && ef.ConfigMapRef.Name == cm.Name {
			hasConfig = true
		}
		if ef.SecretRef != nil {
			assert.True(t, ef.SecretRef.Optional != nil && *ef.SecretRef.Optional, "%s: secret %s must be optional", name, ef.SecretRef.Name)
		}
	}
	assert.True(t, hasConfig, "%s: envFrom %s", name, cm.Name)
	if assert.NotNil(t, pod.AutomountServiceAccountToken, "%s: automountServiceAccountToken", name) {
		assert.False(t, *pod.AutomountServiceAccountToken, "%s mounts an API token", name)
	}
	sa, ok := b.get("ServiceAccount", pod.ServiceAccountName).(*corev1.ServiceAccount)
	if assert.True(t, ok, "%s: serviceAccountName %q is no ServiceAccount of the build", name, pod.ServiceAccountName) {
		assert.Equal(t, name, sa.Name, "%s: a ServiceAccount of its own", name)
		assert.False(t, sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken, "ServiceAccount %s: automountServiceAccountToken false", sa.Name)
	}
	var pdbs int
	for _, o := range b.all("PodDisruptionBudget") {
		pdb := o.obj.(*policyv1.PodDisruptionBudget)
		if selects(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
			pdbs++
		}
	}
	assert.Equal(t, 1, pdbs, "%s: PodDisruptionBudgets selecting it", name)
}

// checkGateway: the gateway Deployment serves on PADDOCK_GATEWAY_ADDR (on
// every interface: the kubelet probes it and the Service reaches it), which
// its port http, its probes (/healthz) and the Service paddock-gateway
// name; it runs two replicas or more (it is stateless), reads its NATS
// user and signing key as private copies (auth), has no Redis password, no
// engine and no host path, and its NetworkPolicies let clients reach 8080
// only and the gateway reach NATS.
func checkGateway(t *testing.T, b *built, cm *corev1.ConfigMap) {
	d, ok := b.get("Deployment", "paddock-gateway").(*appsv1.Deployment)
	require.True(t, ok, "no Deployment paddock-gateway")
	pod := &d.Spec.Template.Spec
	c := container(pod, "gateway")
	require.NotNil(t, c, "paddock-gateway: no container gateway")
	require.Same(t, &pod.Containers[0], c, "paddock-gateway: gateway is the first container")
	assert.Equal(t, []string{"gateway"}, c.Args, "paddock-gateway: runs `paddock gateway`")
	addr, _ := envValue(c, "PADDOCK_GATEWAY_ADDR")
	require.NotEmpty(t, addr, "paddock-gateway: PADDOCK_GATEWAY_ADDR (the default, 127.0.0.1:8080, is unreachable from outside the pod)")
	host := addr[:strings.LastIndexByte(addr, ':')]
	assert.Contains(t, []string{"", "0.0.0.0", "[::]"}, host, "paddock-gateway: PADDOCK_GATEWAY_ADDR %q must listen on every interface", addr)
	port := portOf(t, addr)
	checkPaddockDeployment(t, b, cm, d, "http", port, "/healthz")
	if assert.NotNil(t, d.Spec.Replicas, "paddock-gateway: replicas") {
		assert.GreaterOrEqual(t, *d.Spec.Replicas, int32(2), "paddock-gateway: a spare replica")
	}
	for _, v := range pod.Volumes {
		assert.Nil(t, v.HostPath, "paddock-gateway: hostPath volume %s (it needs no engine)", v.Name)
	}
	_, docker := envValue(c, "DOCKER_HOST")
	assert.False(t, docker, "paddock-gateway: DOCKER_HOST (it needs no engine)")
	checkGatewayAuth(t, b, cm, pod, c)

	svc, ok := b.get("Service", "paddock-gateway").(*corev1.Service)
	if assert.True(t, ok, "no Service paddock-gateway") {
		assert.True(t, selects(svc.Spec.Selector, d.Spec.Template.Labels), "Service paddock-gateway selects the gateway pods")
		var http bool
		for _, p := range svc.Spec.Ports {
			http = http || p.TargetPort.String() == "http" && p.Port == port
		}
		assert.True(t, http, "Service paddock-gateway: port %d to targetPort http", port)
		// An MCP session lives in one replica's memory.
		assert.Equal(t, corev1.ServiceAffinityClientIP, svc.Spec.SessionAffinity, "Service paddock-gateway: sessionAffinity")
	}
	checkGatewayPolicies(t, b, d.Spec.Template.Labels, port)
}

// checkGatewayAuth: the gateway reads its NATS user (PADDOCK_CREDS) and its
// signing key (PADDOCK_GATEWAY_SIGNING_KEY) as 0600 copies in memory that
// its init container auth makes of the Secret, which projects those two
// keys only (no Redis password: it needs no Redis). No other workload
// projects the signing key: it acts as any tenant.
func checkGatewayAuth(t *testing.T, b *built, cm *corev1.ConfigMap, pod *corev1.PodSpec, c *corev1.Container) {
	const name = "paddock-gateway"
	creds, ok := envValue(c, "PADDOCK_CREDS")
	if !ok {
		creds = cm.Data["PADDOCK_CREDS"]
	}
	key, _ := envValue(c, "PADDOCK_GATEWAY_SIGNING_KEY")
	require.NotEmpty(t, creds, "%s: PADDOCK_CREDS (the gateway's NATS user)", name)
	require.NotEmpty(t, key, "%s: PADDOCK_GATEWAY_SIGNING_KEY (else it looks in the data dir)", name)
	assert.Equal(t, path.Dir(creds), path.Dir(key), "%s: one directory for the creds and the key", name)
	sv := secretVolume(pod, authSecret)
	checkAuthVolume(t, name, sv, "gateway.creds", "gateway.nk")
	require.NotNil(t, sv)
	assert.Nil(t, mountOf(c, sv.Name), "%s: the gateway reads a 0600 copy, not the Secret", name)
	var copyVol string
	for _, m := range c.VolumeMounts {
		if path.Dir(creds) == m.MountPath {
			copyVol = m.Name
			assert.True(t, m.ReadOnly, "%s: the credentials mount is read-only", name)
		}
	}
	require.NotEmpty(t, copyVol, "%s: %s is on no volume mount", name, creds)
	if v := volume(pod, copyVol); assert.NotNil(t, v) && assert.NotNil(t, v.EmptyDir, "%s: %s is an emptyDir", name, copyVol) {
		assert.Equal(t, corev1.StorageMediumMemory, v.EmptyDir.Medium, "%s: the copies stay in memory", name)
	}
	init := container(pod, "auth")
	require.NotNil(t, init, "%s: no init container auth copies the credentials", name)
	src, dst := mountOf(init, sv.Name), mountOf(init, copyVol)
	require.NotNil(t, src, "%s: init auth mounts the Secret", name)
	require.NotNil(t, dst, "%s: init auth mounts %s", name, copyVol)
	script := strings.Join(append(slices.Clone(init.Command), init.Args...), " ")
	for from, to := range map[string]string{"gateway.creds": path.Base(creds), "gateway.nk": path.Base(key)} {
		assert.Contains(t, script, fmt.Sprintf("cp %s/%s %s/%s", src.MountPath, itemPath(sv, from), dst.MountPath, to), "%s: init auth copies %s", name, from)
	}
	assert.Regexp(t, `chmod 0?600 `, script, "%s: the copies are 0600", name)

	for _, w := range workloads(b) {
		if w.name == name {
			continue
		}
		for _, v := range w.pod.Volumes {
			if v.Secret == nil {
				continue
			}
			for _, it := range v.Secret.Items {
				assert.NotEqual(t, "gateway.nk", it.Key, "%s %s projects the gateway's signing key", w.kind, w.name)
			}
			assert.NotEmpty(t, v.Secret.Items, "%s %s: volume %s projects every key of Secret %s", w.kind, w.name, v.Name, v.Secret.SecretName)
		}
	}
}

// checkGatewayPolicies: NetworkPolicies select the gateway pods (labels)
// and admit port only; the NATS policy admits the gateway on its client
// port (open to all, or by a rule that selects the gateway pods).
func checkGatewayPolicies(t *testing.T, b *built, labels map[string]string, port int32) {
	var n int
	for _, o := range b.all("NetworkPolicy") {
		np := o.obj.(*networkingv1.NetworkPolicy)
		if !selects(np.Spec.PodSelector.MatchLabels, labels) {
			continue
		}
		n++
		assert.Contains(t, np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress, "NetworkPolicy %s", np.Name)
		require.NotEmpty(t, np.Spec.Ingress, "NetworkPolicy %s selects the gateway and admits nothing", np.Name)
		for _, rule := range np.Spec.Ingress {
			assertPorts(t, np.Name, rule.Ports, int(port))
		}
	}
	assert.Positive(t, n, "no NetworkPolicy selects the gateway pods: every port of theirs is open")

	nats, ok := b.get("NetworkPolicy", "nats").(*networkingv1.NetworkPolicy)
	require.True(t, ok, "no NetworkPolicy nats")
	var reaches bool
	for _, rule := range nats.Spec.Ingress {
		var client bool
		for _, p := range rule.Ports {
			client = client || p.Port.IntValue() == natsClient
		}
		if !client {
			continue
		}
		reaches = reaches || len(rule.From) == 0
		for _, peer := range rule.From {
			reaches = reaches || peer.NamespaceSelector == nil && peer.IPBlock == nil && peer.PodSelector != nil &&
				len(peer.PodSelector.MatchExpressions) == 0 && selectsOrAll(peer.PodSelector.MatchLabels, labels)
		}
	}
	assert.True(t, reaches, "NetworkPolicy nats: the gateway pods must reach port %d", natsClient)
}

// selectsOrAll is selects, where an empty selector selects every pod.
func selectsOrAll(selector, labels map[string]string) bool {
	return len(selector) == 0 || selects(selector, labels)
}

func namespaceOf(b *built) string {
	d := b.get("Deployment", "paddock-worker").(*appsv1.Deployment)
	return d.Namespace
}

func portOf(t *testing.T, addr string) int32 {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	require.GreaterOrEqual(t, i, 0, "address %q", addr)
	p, err := strconv.Atoi(addr[i+1:])
	require.NoError(t, err, "address %q", addr)
	return int32(p)
}

// imageName strips the registry an overlay adds and the tag.
func imageName(image string, b *built) string {
	name, _, _ := strings.Cut(image, ":")
	if strings.Contains(b.dir, "overlays") {
		name = strings.TrimPrefix(name, "registry.example.com/")
	}
	return name
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// configValue is variable name of container c: its own env, else the
// ConfigMap cm it reads.
func configValue(c *corev1.Container, cm *corev1.ConfigMap, name string) (string, bool) {
	if v, ok := envValue(c, name); ok {
		return v, true
	}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil && ef.ConfigMapRef.Name == cm.Name {
			v, ok := cm.Data[name]
			return v, ok
		}
	}
	return "", false
}

// checkVolumeRoot: a worker without a volume root goes with a scheduler
// that refuses volume jobs up front; a worker with one says how volumes
// are held to their quota (docs/operations.md, "Disk quotas") and has a
// sized root: an emptyDir with a sizeLimit or a claim, mounted in the
// engine too (it bind-mounts the volumes). Kernel quotas need a
// privileged worker whose loop mounts reach the engine (Bidirectional).
func checkVolumeRoot(t *testing.T, b *built, cm *corev1.ConfigMap, pod *corev1.PodSpec, w *corev1.Container) {
	root, ok := configValue(w, cm, "PADDOCK_VOLUME_ROOT")
	if !ok || root == "" {
		sd := b.get("Deployment", "paddock-scheduler").(*appsv1.Deployment)
		sc := container(&sd.Spec.Template.Spec, "scheduler")
		if sc == nil {
			sc = &sd.Spec.Template.Spec.Containers[0]
		}
		v, _ := configValue(sc, cm, "PADDOCK_VOLUMES")
		assert.NotEqual(t, "true", v, "the scheduler accepts volume jobs (PADDOCK_VOLUMES) but the worker has no PADDOCK_VOLUME_ROOT")
		return
	}
	quota, _ := configValue(w, cm, "PADDOCK_VOLUME_QUOTA")
	require.Contains(t, []string{"kernel", "walk"}, quota, "worker: a volume root needs PADDOCK_VOLUME_QUOTA set on purpose (kernel or walk)")
	var mount *corev1.VolumeMount
	for i, m := range w.VolumeMounts {
		if m.MountPath == root {
			mount = &w.VolumeMounts[i]
		}
	}
	require.NotNil(t, mount, "worker: PADDOCK_VOLUME_ROOT %s is a volume of its own", root)
	sized := false
	for _, v := range pod.Volumes {
		if v.Name == mount.Name {
			sized = v.PersistentVolumeClaim != nil || v.Ephemeral != nil || (v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil && !v.EmptyDir.SizeLimit.IsZero())
		}
	}
	assert.True(t, sized, "worker: the volume root %s needs a size: an emptyDir with sizeLimit or a claim", root)
	if engine := container(pod, "engine"); engine != nil {
		assertMountedPath(t, engine, root, "engine: the volume root")
	}
	if quota == "kernel" {
		sc := w.SecurityContext
		assert.True(t, sc != nil && sc.Privileged != nil && *sc.Privileged, "worker: kernel quotas need a privileged worker (loop devices, mount)")
		assert.True(t, mount.MountPropagation != nil && *mount.MountPropagation == corev1.MountPropagationBidirectional,
			"worker: kernel quotas need mountPropagation Bidirectional on the volume root, or the engine never sees the mounts")
	}
}

func assertMountedPath(t *testing.T, c *corev1.Container, path, what string) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return
		}
	}
	t.Errorf("%s: %s is on no volume mount of container %s", what, path, c.Name)
}

// --- configuration consistency ----------------------------------------------

// pendingFlags are variables the manifests document for flags that are
// announced but not wired into the CLI (cli/) yet (the healer's LLM settings).
var pendingFlags = []string{"PADDOCK_LLM_API_KEY", "PADDOCK_LLM_URL", "PADDOCK_LLM_MODEL"}

// paddockFlags lists the PADDOCK_<FLAG> names of every flag of the CLI (cli/).
func paddockFlags(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "cli", "*.go"))
	require.NoError(t, err)
	// A flag's name is a string literal or a string constant of cli/.
	re := regexp.MustCompile(`\.(?:String|StringSlice|StringArray|Int|Int64|Float64|Bool|Duration)(?:Var)?P?\(\s*&?[^,]*,\s*(?:"([a-z0-9-]+)"|([A-Za-z_]\w*)\s*,)`)
	constRe := regexp.MustCompile(`(?m)^\s*(?:const\s+)?([A-Za-z_]\w*)\s*=\s*"([a-z0-9-]+)"\s*$`)
	flags := map[string]bool{}
	consts := map[string]string{}
	var named []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range constRe.FindAllSubmatch(src, -1) {
			consts[string(m[1])] = string(m[2])
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			if len(m[1]) > 0 {
				flags["PADDOCK_"+strings.ToUpper(strings.ReplaceAll(string(m[1]), "-", "_"))] = true
			} else {
				named = append(named, string(m[2]))
			}
		}
	}
	for _, c := range named {
		if v, ok := consts[c]; ok {
			flags["PADDOCK_"+strings.ToUpper(strings.ReplaceAll(v, "-", "_"))] = true
		}
	}
	require.Contains(t, flags, "PADDOCK_NATS_URL", "flag scan of cli/ found nothing: update the pattern")
	require.Contains(t, flags, "PADDOCK_SHUTDOWN_TIMEOUT")
	return flags
}

// TestPaddockVariablesAreFlags: every PADDOCK_* variable set by the compose
// file or the manifests is a real flag (a typo would be ignored silently).
func TestPaddockVariablesAreFlags(t *testing.T) {
	t.Parallel()
	flags := paddockFlags(t)
	re := regexp.MustCompile(`\bPADDOCK_[A-Z0-9_]+`)
	sources := []string{filepath.Join("..", "docker-compose.yml"), filepath.Join("..", "docker-compose.ha.yml")}
	require.NoError(t, filepath.WalkDir(k8sDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".env")) {
			sources = append(sources, path)
		}
		return err
	}))
	// Compose-level variables (image names, host paths, the worker's user)
	// are not paddock flags.
	composeOnly := []string{"PADDOCK_IMAGE", "PADDOCK_TOOLS_IMAGE", "PADDOCK_INIT_DIR", "PADDOCK_DOCKER_SOCK", "PADDOCK_RUN_DIR",
		"PADDOCK_WORKER_USER", "PADDOCK_WORKER_CONCURRENCY", "PADDOCK_ADMIN_OUT"}
	for _, f := range sources {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			for _, name := range re.FindAllString(line, -1) {
				isCompose := strings.HasSuffix(f, "docker-compose.yml") || strings.HasSuffix(f, "docker-compose.ha.yml")
				if flags[name] || slices.Contains(composeOnly, name) && isCompose {
					continue
				}
				if slices.Contains(pendingFlags, name) {
					t.Logf("%s: %s is not a flag yet (pendingFlags: announced)", f, name)
					continue
				}
				t.Errorf("%s: %s is no flag of paddock (cli/) (flags read PADDOCK_<FLAG>)", f, name)
			}
		}
	}
}

// TestNATSConfigCopies: kustomize cannot load files outside its folder, so
// deps/ holds a copy of deploy/nats/nats.conf; they must not drift.
func TestNATSConfigCopies(t *testing.T) {
	t.Parallel()
	a, err := os.ReadFile(filepath.Join("nats", "nats.conf"))
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(k8sDir, "deps", "nats.conf"))
	require.NoError(t, err)
	assert.Equal(t, string(a), string(b), "copy deploy/nats/nats.conf to deploy/k8s/deps/nats.conf")
}
