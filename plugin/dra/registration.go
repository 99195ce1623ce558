package dra

import (
	"context"
	"log/slog"

	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// RegistrationSocketName is the name of the driver's registration socket
// in the kubelet's plugin registry directory (the name
// k8s.io/dynamic-resource-allocation's kubeletplugin gives it).
const RegistrationSocketName = DriverName + "-reg.sock"

// supportedServices are the DRA gRPC services the driver serves, most
// recent first: the kubelet (1.37) takes the first one it knows. v1beta1
// is still accepted by the 1.37 kubelet (and used by older ones), and is
// served through the kubelet API's own v1 wrapper. The optional device
// health service (DRAResourceHealth, health.go) follows, v1 then
// v1alpha1: the kubelet picks the DRA service from the DRAPlugin names
// and the health service from these.
var supportedServices = []string{
	drapbv1.DRAPluginService, drapbv1beta1.DRAPluginService,
	drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService,
}

// registrationServer answers the kubelet's plugin watcher
// (pluginregistration v1) on the registration socket: GetInfo says this is
// a DRA plugin, its name, its DRA endpoint and services; the kubelet then
// reports whether it took the plugin.
type registrationServer struct {
	registerapi.UnsafeRegistrationServer

	endpoint string
	log      *slog.Logger
	metrics  *nodeMetrics
}

var _ registerapi.RegistrationServer = (*registrationServer)(nil)

// GetInfo implements registerapi.RegistrationServer.
func (r *registrationServer) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.DRAPlugin,
		Name:              DriverName,
		Endpoint:          r.endpoint,
		SupportedVersions: supportedServices,
	}, nil
}

// NotifyRegistrationStatus implements registerapi.RegistrationServer. A
// refusal is logged with the kubelet's reason and counted; the call itself
// succeeds, since the kubelet has nothing to do with an error here.
func (r *registrationServer) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if st.GetPluginRegistered() {
		r.log.Info("registered with the kubelet as a DRA driver", "driver", DriverName, "endpoint", r.endpoint)
		r.metrics.registered(true)
		return &registerapi.RegistrationStatusResponse{}, nil
	}
	r.log.Error("the kubelet refused the DRA driver's registration", "driver", DriverName, "endpoint", r.endpoint,
		"reason", st.GetError())
	r.metrics.registered(false)
	return &registerapi.RegistrationStatusResponse{}, nil
}
