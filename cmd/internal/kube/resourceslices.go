package kube

import (
	"context"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/featureplug/featureplug/plugin/dra"
)

// ResourceSlices implements Interface.
func (c *Client) ResourceSlices() dra.ResourceSlices { return resourceSlices{c} }

// resourceSlices makes the requests client-go's generated
// ResourceSliceInterface makes (gentype), over the resource.k8s.io/v1
// REST client.
type resourceSlices struct{ c *Client }

func (r resourceSlices) List(ctx context.Context, opts metav1.ListOptions) (*resourcev1.ResourceSliceList, error) {
	out := &resourcev1.ResourceSliceList{}
	err := r.c.resource.Get().Resource("resourceslices").
		VersionedParams(&opts, r.c.params).Timeout(timeout(opts)).Do(ctx).Into(out)
	return out, err
}

func (r resourceSlices) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.c.resource.Get().Resource("resourceslices").
		VersionedParams(&opts, r.c.params).Timeout(timeout(opts)).Watch(ctx)
}

func (r resourceSlices) Create(ctx context.Context, slice *resourcev1.ResourceSlice, opts metav1.CreateOptions) (*resourcev1.ResourceSlice, error) {
	out := &resourcev1.ResourceSlice{}
	err := r.c.resource.Post().Resource("resourceslices").
		VersionedParams(&opts, r.c.params).Body(slice).Do(ctx).Into(out)
	return out, err
}

func (r resourceSlices) Update(ctx context.Context, slice *resourcev1.ResourceSlice, opts metav1.UpdateOptions) (*resourcev1.ResourceSlice, error) {
	out := &resourcev1.ResourceSlice{}
	err := r.c.resource.Put().Resource("resourceslices").Name(slice.Name).
		VersionedParams(&opts, r.c.params).Body(slice).Do(ctx).Into(out)
	return out, err
}

func (r resourceSlices) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.c.resource.Delete().Resource("resourceslices").Name(name).Body(&opts).Do(ctx).Error()
}
