// Command nullplugin is featureplug-bench's floor: the least a kubelet
// device plugin can be. It serves the device-plugin API on a socket in the
// kubelet directory, registers one resource with a fixed list of healthy
// devices (IDs and a NUMA topology hint, all the kubelet needs) and answers
// Allocate with nothing, until SIGTERM; when the kubelet restarts (its
// socket is created again) it registers again. It has no discovery, no
// rules, no metrics and no API client: the bench runs it beside
// `featureplug run` in the same rounds, so featureplug's start-up and
// memory are read against what any Go device plugin pays on the machine
// at that moment.
//
// It is built from the bench's own module (make bench-process) and is no
// part of the agent's image.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "nullplugin:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	dir := flag.String("kubelet-dir", pluginapi.DevicePluginPath, "kubelet device-plugin directory")
	resource := flag.String("resource", "example.com/null", "resource name to register")
	n := flag.Int("devices", 8, "number of devices")
	flag.Parse()

	devs := make([]*pluginapi.Device, *n)
	for i := range devs {
		devs[i] = &pluginapi.Device{
			ID: "null-" + strconv.Itoa(i), Health: pluginapi.Healthy,
			Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(i % 2)}}},
		}
	}
	const endpoint = "nullplugin.sock"
	sock := filepath.Join(*dir, endpoint)
	var srv *grpc.Server
	serve := func() error {
		if srv != nil {
			srv.Stop()
		}
		_ = os.Remove(sock)
		ln, err := net.Listen("unix", sock)
		if err != nil {
			return err
		}
		srv = grpc.NewServer()
		pluginapi.RegisterDevicePluginServer(srv, &server{devs: devs})
		go func() { _ = srv.Serve(ln) }()
		return nil
	}
	if err := serve(); err != nil {
		return err
	}
	defer func() { srv.Stop() }()

	kubelet := filepath.Join(*dir, filepath.Base(pluginapi.KubeletSocket))
	register := func() error {
		conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close() }()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
			Version: pluginapi.Version, Endpoint: endpoint, ResourceName: *resource,
		})
		return err
	}
	if err := register(); err != nil {
		return fmt.Errorf("registering: %w", err)
	}
	// A kubelet restart deletes the plugins' sockets and creates its own
	// again: when ours is gone, serve on a new one and register again once
	// kubelet.sock is back. The directory's changes wake the loop (as
	// device plugins watch it), so that the floor is as idle as a plugin
	// can be; a failed registration (kubelet.sock created, not yet
	// listening) is retried a millisecond later.
	changes, err := watchDir(ctx, *dir)
	if err != nil {
		return err
	}
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-changes:
			if !ok && ctx.Err() == nil {
				return fmt.Errorf("watching %s stopped", *dir)
			}
			if !ok {
				return nil
			}
		case <-retry:
			retry = nil
		}
		if exists(sock) || !exists(kubelet) {
			continue
		}
		if err := serve(); err != nil {
			return err
		}
		if err := register(); err != nil {
			fmt.Fprintln(os.Stderr, "nullplugin: registering again:", err)
			_ = os.Remove(sock)
			retry = time.After(time.Millisecond)
		}
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// server is the device-plugin service: a fixed list, empty answers.
type server struct {
	pluginapi.UnimplementedDevicePluginServer
	devs []*pluginapi.Device
}

func (s *server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (s *server) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: s.devs}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (s *server) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	out := &pluginapi.AllocateResponse{}
	for range req.GetContainerRequests() {
		out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerAllocateResponse{})
	}
	return out, nil
}

func (s *server) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return nil, errors.New("not supported")
}
