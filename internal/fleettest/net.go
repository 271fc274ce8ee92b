package fleettest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// pidDir holds one <run>.pid file per live run: a run whose pid is gone
// left its namespaces behind, and the next run removes them.
const pidDir = "/run/paddock-fleet"

// prefix starts every name the harness makes on the machine.
const prefix = "pdk-"

// network is the bridge and the host namespaces of one run.
type network struct {
	run    string // 6 hex digits
	subnet string // "10.231.N." (a /24)
	hosts  []string
}

// ipCmd runs ip(8) and returns its combined output on failure.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newNetwork picks a run id and a free /24 and creates the hub namespace
// with its bridge, and the test's own veth onto it (.254).
func newNetwork() (*network, error) {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	n := &network{run: hex.EncodeToString(b)}
	subnet, err := freeSubnet(int(b[0]))
	if err != nil {
		return nil, err
	}
	n.subnet = subnet
	if err := os.MkdirAll(pidDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(pidDir, n.run+".pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, err
	}
	hub, root := n.ns("hub"), n.ns("r")
	steps := [][]string{
		{"netns", "add", hub},
		{"-n", hub, "link", "add", "br0", "type", "bridge"},
		{"-n", hub, "link", "set", "br0", "up"},
		{"link", "add", root, "type", "veth", "peer", "name", "peer", "netns", hub},
		{"-n", hub, "link", "set", "peer", "master", "br0", "up"},
		{"addr", "add", n.subnet + "254/24", "dev", root},
		{"link", "set", root, "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			n.teardown()
			return nil, err
		}
	}
	return n, nil
}

// freeSubnet returns the first 10.231.N.0/24 (from N = seed) that no
// address of this machine's root namespace is in.
func freeSubnet(seed int) (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for i := range 250 {
		s := fmt.Sprintf("10.231.%d.", 1+(seed+i)%250)
		used := false
		for _, a := range addrs {
			used = used || strings.HasPrefix(a.String(), s)
		}
		if !used {
			return s, nil
		}
	}
	return "", errors.New("fleettest: no free 10.231.N.0/24")
}

// ns is the name of host's namespace (and of its veth in the hub).
func (n *network) ns(host string) string { return prefix + n.run + "-" + host }

// addHost makes host's namespace with address subnet+octet on the bridge
// (its eth0) and loopback up. It has no default route.
func (n *network) addHost(host string, octet int) (string, error) {
	ns := n.ns(host)
	ip := n.subnet + strconv.Itoa(octet)
	steps := [][]string{
		{"netns", "add", ns},
		{"link", "add", ns, "netns", n.ns("hub"), "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"-n", n.ns("hub"), "link", "set", ns, "master", "br0", "up"},
		{"-n", ns, "addr", "add", ip + "/24", "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return "", err
		}
	}
	n.hosts = append(n.hosts, host)
	return ip, nil
}

// partition drops every packet of host's namespace but loopback's (both
// ways), as a cut cable would: nothing is refused, everything times out.
func (n *network) partition(host string) error {
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		args := []string{"netns", "exec", n.ns(host), "iptables", "-w", "-A", chain, "!", "-i", "lo", "-j", "DROP"}
		if chain == "OUTPUT" {
			args[8] = "-o"
		}
		if err := ipCmd(args...); err != nil {
			return err
		}
	}
	return nil
}

// heal undoes partition.
func (n *network) heal(host string) error {
	return ipCmd("netns", "exec", n.ns(host), "iptables", "-w", "-F")
}

// killHost SIGKILLs every process in host's namespace and returns how
// many it found.
func (n *network) killHost(host string) int {
	pids := nsPids(n.ns(host))
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	return len(pids)
}

// nsPids lists the processes in namespace ns.
func nsPids(ns string) []int {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

// teardown kills every process in the run's namespaces and removes them,
// the root veth (its peer goes with the hub) and the pid file.
func (n *network) teardown() {
	removeRun(n.run)
}

// removeRun removes everything of run: processes, namespaces, root veth.
func removeRun(run string) {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], prefix+run+"-") {
			continue
		}
		for _, p := range nsPids(f[0]) {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		_ = ipCmd("netns", "del", f[0])
	}
	_ = ipCmd("link", "del", prefix+run+"-r")
	_ = os.Remove(filepath.Join(pidDir, run+".pid"))
}

// staleRuns returns the runs whose namespaces (or pid file) are on the
// machine but whose process is gone.
func staleRuns() []string {
	runs := map[string]bool{}
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			if run, _, ok := strings.Cut(strings.TrimPrefix(f[0], prefix), "-"); ok {
				runs[run] = true
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(pidDir, "*.pid"))
	for _, f := range files {
		runs[strings.TrimSuffix(filepath.Base(f), ".pid")] = true
	}
	var stale []string
	for run := range runs {
		b, err := os.ReadFile(filepath.Join(pidDir, run+".pid"))
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != nil {
			stale = append(stale, run)
		}
	}
	return stale
}
