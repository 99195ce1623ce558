package kube

import (
	"context"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/featureplug/featureplug/plugin/dra"
)

// ResourceClaims implements Interface.
func (c *Client) ResourceClaims(namespace string) dra.ResourceClaims {
	return resourceClaims{c, namespace}
}

// resourceClaims makes the request client-go's generated
// ResourceClaimInterface makes (gentype), over the resource.k8s.io/v1
// REST client.
type resourceClaims struct {
	c  *Client
	ns string
}

func (r resourceClaims) Get(ctx context.Context, name string, opts metav1.GetOptions) (*resourcev1.ResourceClaim, error) {
	out := &resourcev1.ResourceClaim{}
	err := r.c.resource.Get().Namespace(r.ns).Resource("resourceclaims").Name(name).
		VersionedParams(&opts, r.c.params).Do(ctx).Into(out)
	return out, err
}

func (r resourceClaims) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*resourcev1.ResourceClaim, error) {
	out := &resourcev1.ResourceClaim{}
	err := r.c.resource.Patch(pt).Namespace(r.ns).Resource("resourceclaims").Name(name).
		SubResource(subresources...).VersionedParams(&opts, r.c.params).Body(data).Do(ctx).Into(out)
	return out, err
}
