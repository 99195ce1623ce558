package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/featureplug/featureplug/test/harness"
)

// outageDuration is how long the API server stays unreachable.
const outageDuration = 30 * time.Second

// publishAfterOutageTimeout bounds how long publishing may take to resume
// once the API server is back: the publisher's backoff is capped at about a
// minute.
const publishAfterOutageTimeout = 3 * time.Minute

// testOutage cuts the agent off the API server for 30 seconds: device-plugin
// serving never stops (capacity stays, a hardware change still reaches the
// kubelet, Allocate works), and the change made during the outage is
// published once the API server is reachable again.
func (c *cluster) testOutage(t *testing.T) {
	proxy := startProxy(t, c.api.Config.Host)
	kubeconfig := proxiedKubeconfig(t, c.api.KubeconfigPath, proxy.addr)
	node := c.node(t, "outage-dgx-a100", nil)
	fake := copyFile(t, bundledFakeNode("dgx-a100"), t.TempDir(), "node.yaml")
	dir := shortTempDir(t)
	peer := harness.StartKubeletPeer(t, dir)
	a := startAgent(t, agentSpec{
		Node:       node,
		FakeNode:   fake,
		Publish:    "nodefeature",
		Rules:      "mixed",
		KubeletDir: dir,
		Kubeconfig: kubeconfig,
		Namespace:  agentNamespace,
		Extra:      []string{"--resync-interval", "1s", "--rediscover-interval", "1h"},
	})
	c.waitLabels(t, node, map[string]string{"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"})
	waitCapacities(t, peer, map[string]int64{"nvidia.com/gpu": 4, "nvidia.com/mig-1g.5gb": 6})

	proxy.down()
	outage := time.Now()
	errorsBefore := a.metric(t, "featureplug_publish_attempts_total", `result="error"`)

	// During the outage, two whole GPUs go away: the kubelet side follows
	// at once.
	fewer, err := os.ReadFile(filepath.Join("testdata", "dgx-a100-six-gpus.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, fake, fewer)
	a.hup(t)
	waitCapacities(t, peer, map[string]int64{"nvidia.com/gpu": 2, "nvidia.com/mig-1g.5gb": 6})
	ctx, cancel := context.WithTimeout(context.Background(), outageDuration+publishAfterOutageTimeout)
	defer cancel()
	if _, err := peer.Allocate(ctx, "during-outage", "main", "nvidia.com/gpu", 1); err != nil {
		t.Fatalf("allocating during the API server outage: %v", err)
	}
	for time.Since(outage) < outageDuration {
		if c, al := peer.Capacity("nvidia.com/gpu"); c != 2 || al != 2 {
			t.Fatalf("%s into the outage: nvidia.com/gpu capacity %d, allocatable %d, want 2, 2", time.Since(outage).Round(time.Second), c, al)
		}
		if !a.Running() {
			t.Fatalf("featureplug exited during the outage: %v", a.ExitErr())
		}
		time.Sleep(500 * time.Millisecond)
	}
	if _, err := peer.Allocate(ctx, "end-of-outage", "main", "nvidia.com/mig-1g.5gb", 1); err != nil {
		t.Fatalf("allocating at the end of the API server outage: %v", err)
	}
	if got := a.metric(t, "featureplug_publish_attempts_total", `result="error"`); got <= errorsBefore {
		t.Errorf("no failed publish counted during a %s outage (featureplug_publish_attempts_total{result=\"error\"} stayed %v)", outageDuration, got)
	}

	proxy.up(t)
	back := time.Now()
	wctx, wcancel := context.WithTimeout(context.Background(), publishAfterOutageTimeout)
	defer wcancel()
	if err := c.api.WaitNodeLabels(wctx, node, map[string]string{"nvidia.com/gpu.count": "6"}); err != nil {
		t.Fatalf("the change made during the outage was not published after it: %v", err)
	}
	t.Logf("the change made during a %s outage reached the node labels %s after the API server was back",
		outageDuration, time.Since(back).Round(time.Millisecond))
}

// proxiedKubeconfig writes a copy of the kubeconfig at path whose clusters
// point at addr (host:port) instead, and returns the copy's path.
func proxiedKubeconfig(t *testing.T, path, addr string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatalf("loading kubeconfig %s: %v", path, err)
	}
	for _, cl := range cfg.Clusters {
		cl.Server = "https://" + addr
	}
	out := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, out); err != nil {
		t.Fatalf("writing kubeconfig %s: %v", out, err)
	}
	return out
}

// tcpProxy forwards a loopback port to the API server. Taking it down closes
// the port and every connection through it, which to a client is the API
// server going away; bringing it up listens on the same port again.
type tcpProxy struct {
	addr   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// startProxy starts a proxy to target (an https:// URL or host:port) on a
// free loopback port; it is taken down when the test ends.
func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		t.Fatalf("API server address %q is not a URL: %v", target, err)
	}
	p := &tcpProxy{target: u.Host, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening for the API server proxy: %v", err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.down)
	return p
}

// up listens on the proxy's address again.
func (p *tcpProxy) up(t *testing.T) {
	t.Helper()
	var ln net.Listener
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := waitFor(ctx, func() (bool, string) {
		var err error
		ln, err = net.Listen("tcp", p.addr)
		return err == nil, fmt.Sprint(err)
	}); err != nil {
		t.Fatalf("listening on %s again: %v", p.addr, err)
	}
	p.serve(ln)
}

func (p *tcpProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.forward(c)
			}()
		}
	}()
}

func (p *tcpProxy) forward(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c, up) {
		c.Close()
		up.Close()
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	c.Close()
	up.Close()
	<-done
	p.untrack(c, up)
}

// track records the connections unless the proxy is down.
func (p *tcpProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *tcpProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// down closes the listener and every open connection, and waits for the
// proxy's goroutines. It is safe to call when already down.
func (p *tcpProxy) down() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
