package deviceplugin

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestListAndWatchStreamsBounded: a server keeps at most
// maxListAndWatchStreams streams open (the kubelet's among them); one more
// is refused with ResourceExhausted naming the bound and counted; a stream
// that ends frees its place.
func TestListAndWatchStreamsBounded(t *testing.T) {
	const res = "nvidia.com/gpu"
	reg := prometheus.NewRegistry()
	opts := DefaultOptions()
	opts.Registerer = reg
	e := startEnv(t, opts, h100Plan(res))
	e.waitRegistered(1, res) // the kubelet's stream
	sock, _ := SocketPath(e.dir, res)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	client := pluginapi.NewDevicePluginClient(conn)
	open := func(ctx context.Context) error {
		stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
		if err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	}
	ctx, cancel := context.WithCancel(e.ctx())
	defer cancel()
	var cancels []context.CancelFunc
	for i := range maxListAndWatchStreams - 1 {
		sctx, scancel := context.WithCancel(ctx)
		cancels = append(cancels, scancel)
		if err := open(sctx); err != nil {
			t.Fatalf("stream %d of %d: %v", i+2, maxListAndWatchStreams, err)
		}
	}
	for range 3 {
		err := open(ctx)
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "resource nvidia.com/gpu: 8 ListAndWatch streams are open") {
			t.Fatalf("a stream over the bound: %v, want ResourceExhausted naming the bound", err)
		}
	}
	if got := metricValue(t, reg, "featureplug_plugin_streams_refused_total", map[string]string{"resource": res}); got != 3 {
		t.Errorf("featureplug_plugin_streams_refused_total = %v, want 3", got)
	}
	cancels[0]()
	// The ended stream's place is taken again once its handler returns.
	waitTrue(t, "a place free again", func() bool {
		sctx, scancel := context.WithCancel(ctx)
		cancels = append(cancels, scancel)
		return open(sctx) == nil
	})
	if !e.kubelet.Streaming(res) {
		t.Error("the kubelet's stream ended")
	}
}
