package kube

import (
	"context"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeviceClasses is the part of client-go's typed DeviceClassInterface
// (resource.k8s.io/v1, cluster-scoped) `featureplug rules diff` uses: it
// lists the classes in effect, to compare with those a rules file makes.
// That interface satisfies it.
type DeviceClasses interface {
	List(ctx context.Context, opts metav1.ListOptions) (*resourcev1.DeviceClassList, error)
}

// DeviceClasses implements Interface.
func (c *Client) DeviceClasses() DeviceClasses { return deviceClasses{c} }

// deviceClasses makes the request client-go's generated
// DeviceClassInterface makes (gentype), over the resource.k8s.io/v1 REST
// client.
type deviceClasses struct{ c *Client }

func (d deviceClasses) List(ctx context.Context, opts metav1.ListOptions) (*resourcev1.DeviceClassList, error) {
	out := &resourcev1.DeviceClassList{}
	err := d.c.resource.Get().Resource("deviceclasses").
		VersionedParams(&opts, d.c.params).Timeout(timeout(opts)).Do(ctx).Into(out)
	return out, err
}
