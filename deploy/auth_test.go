package deploy_test

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/paddockhq/paddock/internal/devstack"
)

// How the deployments authenticate: NATS in operator mode and Redis with an
// ACL, every credential from `paddock auth init`, never in a manifest.

// authSecret is the Secret made from `paddock auth init`'s output
// (docs/operations.md, "Kubernetes"), and its keys.
const authSecret = "paddock-auth"

// The ports Redis and NATS serve.
const (
	redisPort   = 6379
	natsClient  = 4222
	natsMonitor = 8222
)

// triggerAuthentication is the part of KEDA's keda.sh/v1alpha1
// TriggerAuthentication that these manifests use.
type triggerAuthentication struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretTargetRef []struct {
			Parameter string `json:"parameter"`
			Name      string `json:"name"`
			Key       string `json:"key"`
		} `json:"secretTargetRef"`
	} `json:"spec"`
}

// --- Kubernetes ---------------------------------------------------------------

// checkAuthVolume: v is the Secret paddock-auth, mode 0400, projecting
// exactly keys (a missing Secret stops the pod instead of starting it open).
func checkAuthVolume(t *testing.T, where string, v *corev1.Volume, keys ...string) {
	t.Helper()
	if !assert.NotNil(t, v, "%s: no volume of the Secret %s", where, authSecret) {
		return
	}
	s := v.Secret
	require.NotNil(t, s, "%s: volume %s is no Secret", where, v.Name)
	assert.Equal(t, authSecret, s.SecretName, where)
	if assert.NotNil(t, s.DefaultMode, "%s: defaultMode", where) {
		assert.Equal(t, int32(0o400), *s.DefaultMode, "%s: defaultMode 0400", where)
	}
	assert.False(t, s.Optional != nil && *s.Optional, "%s: the Secret must not be optional", where)
	var got []string
	for _, it := range s.Items {
		got = append(got, it.Key)
	}
	assert.ElementsMatch(t, keys, got, "%s: the keys projected (only what it needs)", where)
}

// secretVolume is the pod's volume of the Secret name, or nil.
func secretVolume(pod *corev1.PodSpec, name string) *corev1.Volume {
	for i := range pod.Volumes {
		if s := pod.Volumes[i].Secret; s != nil && s.SecretName == name {
			return &pod.Volumes[i]
		}
	}
	return nil
}

func volume(pod *corev1.PodSpec, name string) *corev1.Volume {
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == name {
			return &pod.Volumes[i]
		}
	}
	return nil
}

func mountOf(c *corev1.Container, vol string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == vol {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

// itemPath is where key of a Secret volume appears under its mount.
func itemPath(v *corev1.Volume, key string) string {
	for _, it := range v.Secret.Items {
		if it.Key == key {
			return it.Path
		}
	}
	return key
}

func statefulSetPod(t *testing.T, b *built, name string) *corev1.PodSpec {
	t.Helper()
	ss, ok := b.get("StatefulSet", name).(*appsv1.StatefulSet)
	require.True(t, ok, "no StatefulSet %s", name)
	return &ss.Spec.Template.Spec
}

// checkSharedServicesAuth: NATS includes the operator-mode fragment from
// the Secret where its config's include resolves, and Redis loads its ACL
// from the Secret; neither has a password of its own or an open mode.
func checkSharedServicesAuth(t *testing.T, b *built) {
	pod := statefulSetPod(t, b, "nats")
	c := container(pod, "nats")
	require.NotNil(t, c, "nats container")
	v := secretVolume(pod, authSecret)
	checkAuthVolume(t, "nats", v, "nats-auth.conf")
	cm := b.configMap("nats-config")
	require.NotNil(t, cm, "nats-config ConfigMap")
	conf := mountOf(c, "config")
	require.NotNil(t, conf, "nats: the config mount")
	inc := regexp.MustCompile(`(?m)^\s*include\s+"?([^"\s]+)"?`).FindStringSubmatch(cm.Data["nats.conf"])
	require.NotNil(t, inc, "nats.conf includes no auth fragment: operator mode is off")
	if v != nil {
		m := mountOf(c, v.Name)
		if assert.NotNil(t, m, "nats: the Secret is not mounted") {
			// An include is relative to the including file.
			assert.Equal(t, path.Join(path.Dir(conf.MountPath), inc[1]), path.Join(m.MountPath, itemPath(v, "nats-auth.conf")),
				"nats: include %q of %s must resolve to the Secret's file", inc[1], conf.MountPath)
			assert.True(t, m.ReadOnly, "nats: the Secret mount is read-only")
		}
	}

	pod = statefulSetPod(t, b, "redis")
	c = container(pod, "redis")
	require.NotNil(t, c, "redis container")
	v = secretVolume(pod, authSecret)
	checkAuthVolume(t, "redis", v, "redis-users.acl")
	i := slices.Index(c.Args, "--aclfile")
	require.True(t, i >= 0 && i+1 < len(c.Args), "redis: no --aclfile: the default user would be open")
	if v != nil {
		m := mountOf(c, v.Name)
		if assert.NotNil(t, m, "redis: the Secret is not mounted") {
			assert.Equal(t, path.Join(m.MountPath, itemPath(v, "redis-users.acl")), c.Args[i+1], "redis: --aclfile is the Secret's ACL")
		}
	}
	for _, bad := range []string{"--requirepass", "--protected-mode", "--user"} {
		assert.NotContains(t, c.Args, bad, "redis: %s (the ACL file is the one place of its users)", bad)
	}
}

// checkServiceAuth: the scheduler and the worker read --creds and
// --redis-password-file (PADDOCK_CREDS, PADDOCK_REDIS_PASSWORD_FILE) from
// a private in-memory copy that their init container "auth" makes of the
// Secret. (paddock refuses a password file that the group may read, which
// is what the kubelet makes of a Secret's files under fsGroup.)
func checkServiceAuth(t *testing.T, b *built, cm *corev1.ConfigMap) {
	creds, pw := cm.Data["PADDOCK_CREDS"], cm.Data["PADDOCK_REDIS_PASSWORD_FILE"]
	require.NotEmpty(t, creds, "paddock-config: PADDOCK_CREDS (the service's NATS user)")
	require.NotEmpty(t, pw, "paddock-config: PADDOCK_REDIS_PASSWORD_FILE")
	assert.NotContains(t, cm.Data["PADDOCK_REDIS_URL"], "@", "PADDOCK_REDIS_URL carries no credentials")
	for name, key := range map[string]string{"paddock-scheduler": "scheduler.creds", "paddock-worker": "worker.creds"} {
		d := b.get("Deployment", name).(*appsv1.Deployment)
		pod := &d.Spec.Template.Spec
		c := &pod.Containers[0]
		sv := secretVolume(pod, authSecret)
		checkAuthVolume(t, name, sv, key, "redis.password")
		if sv != nil {
			assert.Nil(t, mountOf(c, sv.Name), "%s: the service reads a 0600 copy, not the Secret", name)
		}
		var copyVol string
		for _, m := range c.VolumeMounts {
			if path.Dir(creds) == m.MountPath {
				copyVol = m.Name
				assert.True(t, m.ReadOnly, "%s: the credentials mount is read-only", name)
			}
		}
		require.NotEmpty(t, copyVol, "%s: %s is on no volume mount", name, creds)
		assert.Equal(t, path.Dir(creds), path.Dir(pw), "one directory for both")
		if v := volume(pod, copyVol); assert.NotNil(t, v) && assert.NotNil(t, v.EmptyDir, "%s: %s is an emptyDir", name, copyVol) {
			assert.Equal(t, corev1.StorageMediumMemory, v.EmptyDir.Medium, "%s: the copies stay in memory", name)
		}
		init := container(pod, "auth")
		if !assert.NotNil(t, init, "%s: no init container auth copies the credentials", name) || sv == nil {
			continue
		}
		src, dst := mountOf(init, sv.Name), mountOf(init, copyVol)
		require.NotNil(t, src, "%s: init auth mounts the Secret", name)
		require.NotNil(t, dst, "%s: init auth mounts %s", name, copyVol)
		script := strings.Join(append(slices.Clone(init.Command), init.Args...), " ")
		for from, to := range map[string]string{key: path.Base(creds), "redis.password": path.Base(pw)} {
			assert.Contains(t, script, fmt.Sprintf("cp %s/%s %s/%s", src.MountPath, itemPath(sv, from), dst.MountPath, to), "%s: init auth copies %s", name, from)
		}
		assert.Regexp(t, `chmod 0?600 `, script, "%s: the copies are 0600", name)
	}
}

// checkRedisPolicies: the NetworkPolicies that select the Redis pods let in
// only the scheduler and worker pods, and KEDA's operator where a redis
// trigger reads the queues, on the Redis port only. NATS takes clients on
// its client port from anywhere (they authenticate) and its monitoring port
// from the namespace only.
func checkRedisPolicies(t *testing.T, b *built) {
	redisLabels := statefulSetTemplateLabels(t, b, "redis")
	var policies []*networkingv1.NetworkPolicy
	for _, o := range b.all("NetworkPolicy") {
		np := o.obj.(*networkingv1.NetworkPolicy)
		if selects(np.Spec.PodSelector.MatchLabels, redisLabels) {
			policies = append(policies, np)
		}
	}
	require.NotEmpty(t, policies, "no NetworkPolicy selects the Redis pods: every pod of the cluster reaches them")
	allowed := map[string]bool{}
	for _, np := range policies {
		assert.Contains(t, np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress, "NetworkPolicy %s", np.Name)
		for _, rule := range np.Spec.Ingress {
			assertPorts(t, np.Name, rule.Ports, redisPort)
			require.NotEmpty(t, rule.From, "NetworkPolicy %s: a rule without from lets every pod reach Redis", np.Name)
			for _, peer := range rule.From {
				checkRedisPeer(t, b, np.Name, peer, allowed)
			}
		}
	}
	assert.True(t, allowed["paddock-scheduler"], "the schedulers must reach Redis")
	assert.True(t, allowed["paddock-worker"], "the workers must reach Redis")
	checkNATSPolicy(t, b)
}

// checkRedisPeer: peer is the pods of the scheduler or the worker
// Deployment (this namespace), or KEDA's operator with a redis trigger.
func checkRedisPeer(t *testing.T, b *built, policy string, peer networkingv1.NetworkPolicyPeer, allowed map[string]bool) {
	assert.Nil(t, peer.IPBlock, "NetworkPolicy %s: no ipBlock to Redis", policy)
	if peer.NamespaceSelector != nil {
		assert.Equal(t, map[string]string{"kubernetes.io/metadata.name": "keda"}, peer.NamespaceSelector.MatchLabels, "NetworkPolicy %s: another namespace than KEDA's", policy)
		if assert.NotNil(t, peer.PodSelector, "NetworkPolicy %s: every pod of namespace keda", policy) {
			assert.Equal(t, map[string]string{"app.kubernetes.io/name": "keda-operator"}, peer.PodSelector.MatchLabels, policy)
		}
		assert.True(t, hasTrigger(b, "redis"), "NetworkPolicy %s lets KEDA in, but no redis trigger reads Redis", policy)
		return
	}
	require.NotNil(t, peer.PodSelector, "NetworkPolicy %s: a peer that is neither pods nor a namespace", policy)
	assert.Empty(t, peer.PodSelector.MatchExpressions, "NetworkPolicy %s: matchLabels only", policy)
	if !assert.NotEmpty(t, peer.PodSelector.MatchLabels, "NetworkPolicy %s: an empty podSelector lets every pod of the namespace reach Redis", policy) {
		return
	}
	var matched []string
	for _, w := range workloads(b) {
		if selects(peer.PodSelector.MatchLabels, w.labels) {
			matched = append(matched, w.name)
		}
	}
	if assert.Len(t, matched, 1, "NetworkPolicy %s: peer %v must select the scheduler or the worker pods, exactly", policy, peer.PodSelector.MatchLabels) {
		assert.Contains(t, []string{"paddock-scheduler", "paddock-worker"}, matched[0], "NetworkPolicy %s lets %s reach Redis", policy, matched[0])
		allowed[matched[0]] = true
	}
}

// checkNATSPolicy: the client port is open to every source (clients
// authenticate), the monitoring port only to this namespace's pods.
func checkNATSPolicy(t *testing.T, b *built) {
	natsLabels := statefulSetTemplateLabels(t, b, "nats")
	np, ok := b.get("NetworkPolicy", "nats").(*networkingv1.NetworkPolicy)
	require.True(t, ok, "no NetworkPolicy nats")
	require.True(t, selects(np.Spec.PodSelector.MatchLabels, natsLabels), "NetworkPolicy nats selects the NATS pods")
	clientOpen, monitorLocal := false, false
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			switch p.Port.IntValue() {
			case natsClient:
				clientOpen = clientOpen || len(rule.From) == 0
			case natsMonitor:
				assert.NotEmpty(t, rule.From, "NetworkPolicy nats: the monitoring port (no authentication) open to every source")
				for _, peer := range rule.From {
					assert.Nil(t, peer.NamespaceSelector, "NetworkPolicy nats: the monitoring port from another namespace")
					assert.Nil(t, peer.IPBlock, "NetworkPolicy nats: the monitoring port from an ipBlock")
				}
				monitorLocal = len(rule.From) > 0
			default:
				t.Errorf("NetworkPolicy nats: port %s is no port of NATS", p.Port.String())
			}
		}
	}
	assert.True(t, clientOpen, "NetworkPolicy nats: pipelines reach the client port %d", natsClient)
	assert.True(t, monitorLocal, "NetworkPolicy nats: the namespace reaches the monitoring port %d", natsMonitor)
}

func assertPorts(t *testing.T, policy string, ports []networkingv1.NetworkPolicyPort, want int) {
	t.Helper()
	require.NotEmpty(t, ports, "NetworkPolicy %s: a rule without ports opens every port", policy)
	for _, p := range ports {
		if assert.NotNil(t, p.Port, policy) {
			assert.Equal(t, want, p.Port.IntValue(), "NetworkPolicy %s: port", policy)
		}
	}
}

func statefulSetTemplateLabels(t *testing.T, b *built, name string) map[string]string {
	t.Helper()
	ss, ok := b.get("StatefulSet", name).(*appsv1.StatefulSet)
	require.True(t, ok, "no StatefulSet %s", name)
	return ss.Spec.Template.Labels
}

func hasTrigger(b *built, kind string) bool {
	for _, o := range b.all("ScaledObject") {
		for _, tr := range o.obj.(*scaledObject).Spec.Triggers {
			if tr.Type == kind {
				return true
			}
		}
	}
	return false
}

// checkKEDAAuth: every trigger that reads Redis logs in as the ACL user
// with the password of a TriggerAuthentication that takes it from the
// Secret; no trigger carries a password. (A prometheus trigger reads
// Prometheus, which holds no credential of Paddock's: it needs none.)
func checkKEDAAuth(t *testing.T, b *built, so *scaledObject) {
	for _, tr := range so.Spec.Triggers {
		for _, k := range []string{"password", "passwordFromEnv"} {
			assert.NotContains(t, tr.Metadata, k, "trigger %s: the password comes from the TriggerAuthentication", tr.Name)
		}
		if tr.Type != "redis" {
			continue
		}
		assert.Equal(t, devstack.DefaultRedisUser, tr.Metadata["username"], "trigger %s: the ACL user", tr.Name)
		ref := tr.AuthenticationRef
		if !assert.NotNil(t, ref, "trigger %s: no authenticationRef: Redis answers NOAUTH", tr.Name) {
			continue
		}
		assert.Contains(t, []string{"", "TriggerAuthentication"}, ref.Kind, "trigger %s", tr.Name)
		ta, ok := b.get("TriggerAuthentication", ref.Name).(*triggerAuthentication)
		if !assert.True(t, ok, "trigger %s: no TriggerAuthentication %s in the build", tr.Name, ref.Name) {
			continue
		}
		var found bool
		for _, s := range ta.Spec.SecretTargetRef {
			found = found || s.Parameter == "password" && s.Name == authSecret && s.Key == "redis.password"
		}
		assert.True(t, found, "TriggerAuthentication %s: parameter password from Secret %s key redis.password", ta.Name, authSecret)
	}
}

// --- no secret in the repository -----------------------------------------------

// literalSecret matches what must never be in a deployment file: a URL
// with a password, a Redis password or ACL password, an nkey seed, a JWT,
// and a password-like key with a value (a *_FILE path is fine).
var literalSecret = regexp.MustCompile(`(?m)` +
	`(?i:[a-z][a-z0-9+.-]*://[^/\s:@"']*:[^/\s@"']+@)` + // scheme://user:password@
	`|(?i:requirepass)` +
	`|\bon\s+>\S` + // an ACL user with a password
	`|\bS[UAO][A-Z2-7]{56}\b` + // an nkey seed
	`|eyJ[A-Za-z0-9_-]{8,}\.eyJ` + // a JWT
	`|^[\s-]*"?[A-Z0-9_]*(PASSWORD|PASSWD|SECRET|TOKEN|API_KEY|APIKEY)"?\s*[:=]\s*["']?[^\s"'$]` + // NAME: value, NAME=value
	`|^\s*(?i:password|passwd|token|secret)\s*:\s*["']?\S`) // password: value

// TestNoLiteralSecrets: no deployment file holds a password, a key or a
// credential, and no manifest makes a Secret: every one comes from `paddock
// auth init`, into the Secret paddock-auth or the compose auth volumes.
func TestNoLiteralSecrets(t *testing.T) {
	t.Parallel()
	files := []string{filepath.Join("..", "docker-compose.yml"), filepath.Join("..", "docker-compose.ha.yml"), filepath.Join("nats", "nats.conf")}
	ha, err := filepath.Glob(filepath.Join("ha", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, ha, "deploy/ha")
	files = append(files, ha...)
	require.NoError(t, filepath.WalkDir(k8sDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	}))
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		for i, line := range strings.Split(string(data), "\n") {
			if m := literalSecret.FindString(line); m != "" {
				t.Errorf("%s:%d: a literal secret (%q): take it from the Secret %s / the auth volume", f, i+1, m, authSecret)
			}
		}
		if !strings.HasSuffix(f, ".yaml") {
			continue
		}
		objs, err := decodeStrict(f, data)
		require.NoError(t, err)
		for _, o := range objs {
			assert.NotEqual(t, "Secret", o.kind, "%s: a Secret in the repository (%s): create it from paddock auth init", f, o.name)
			if k, ok := o.obj.(*kustomization); ok {
				assert.Empty(t, k.SecretGenerator, "%s: a secretGenerator makes a Secret from files in the repository", f)
			}
		}
	}
}

// The scanner must catch what it is for.
func TestLiteralSecretPattern(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		"PADDOCK_REDIS_URL=redis://paddock:hunter2@redis:6379",
		"  - redis://:pw@redis:6379",
		"      - --requirepass",
		"user paddock on >81a19f22 ~* &* +@all",
		"SUAGJHW4SCV2GMS5OR3PXBE3TLRQMAZT3IGGZEIYRDHHUVH5C7YXDPTKZY",
		"operator: eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJqdGkiOiJF",
		"  REDIS_PASSWORD: hunter2",
		"PADDOCK_LLM_API_KEY=sk-123",
		"        password: hunter2",
	} {
		assert.Regexp(t, literalSecret, bad)
	}
	for _, good := range []string{
		"PADDOCK_REDIS_PASSWORD_FILE=/etc/paddock/auth/redis.password",
		"  PADDOCK_REDIS_PASSWORD_FILE: /etc/paddock/auth/redis.password",
		"    - parameter: password",
		"      key: redis.password",
		"  PADDOCK_REDIS_URL: ${PADDOCK_REDIS_URL:-redis://redis:6379}",
		"#     --from-literal=PADDOCK_LLM_API_KEY=...",
		"            - name: PADDOCK_LLM_API_KEY",
	} {
		assert.NotRegexp(t, literalSecret, good)
	}
}

// --- compose ---------------------------------------------------------------------

// composeFile is the part of docker-compose.yml these checks read.
type composeFile struct {
	Services map[string]struct {
		Command     []string          `json:"command"`
		User        string            `json:"user"`
		Environment map[string]string `json:"environment"`
		Volumes     []string          `json:"volumes"`
	} `json:"services"`
}

// TestComposeAuthWiring: only the auth one-shots mount the signing keys;
// every service reads its credentials from a volume of its own, read-only,
// where the paths point; Redis loads the ACL and NATS the fragment where
// nats.conf includes it. (TestCompose runs it for real.)
func TestComposeAuthWiring(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "docker-compose.yml"))
	require.NoError(t, err)
	var cf composeFile
	require.NoError(t, yaml.Unmarshal(raw, &cf))
	mounts := func(svc string) map[string]string { // volume → "target[:ro]"
		out := map[string]string{}
		for _, v := range cf.Services[svc].Volumes {
			src, rest, _ := strings.Cut(v, ":")
			out[src] = rest
		}
		return out
	}
	for name := range cf.Services {
		if _, ok := mounts(name)["auth"]; ok {
			assert.Contains(t, []string{"auth", "dev-tenant", "admin"}, name, "%s mounts the signing keys", name)
		}
	}
	for svc, vol := range map[string]string{"scheduler": "auth-scheduler", "worker": "auth-worker"} {
		target, ok := mounts(svc)[vol]
		require.True(t, ok, "%s: no volume %s", svc, vol)
		dir, ro := strings.CutSuffix(target, ":ro")
		assert.True(t, ro, "%s: %s read-only", svc, vol)
		env := cf.Services[svc].Environment
		assert.Equal(t, dir, path.Dir(env["PADDOCK_CREDS"]), "%s: PADDOCK_CREDS in %s", svc, vol)
		assert.Equal(t, dir, path.Dir(env["PADDOCK_REDIS_PASSWORD_FILE"]), "%s: PADDOCK_REDIS_PASSWORD_FILE in %s", svc, vol)
	}
	redis := cf.Services["redis"].Command
	i := slices.Index(redis, "--aclfile")
	require.True(t, i >= 0 && i+1 < len(redis), "redis: no --aclfile")
	assert.Equal(t, "/etc/redis/auth:ro", mounts("redis")["auth-redis"], "redis: the ACL volume")
	assert.Equal(t, "/etc/redis/auth", path.Dir(redis[i+1]))
	assert.NotContains(t, redis, "--protected-mode")
	conf, err := os.ReadFile(filepath.Join("nats", "nats.conf"))
	require.NoError(t, err)
	inc := regexp.MustCompile(`(?m)^\s*include\s+"?([^"\s]+)"?`).FindSubmatch(conf)
	require.NotNil(t, inc, "nats.conf: no include of the auth fragment")
	assert.Equal(t, "/etc/nats/auth:ro", mounts("nats")["auth-nats"], "nats: the fragment's volume")
	assert.Equal(t, "/etc/nats/auth/nats-auth.conf", path.Join("/etc/nats", string(inc[1])), "nats.conf is mounted in /etc/nats")
}
