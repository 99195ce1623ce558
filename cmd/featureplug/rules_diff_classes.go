package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/rules/draclass"
	"github.com/featureplug/featureplug/rules/plan"
)

// diffClasses are the DeviceClasses of the resources a diff sees served
// through DRA: the cluster's, and the selectors in effect and proposed.
type diffClasses struct {
	// resources are the resources served through DRA on some node,
	// before or after, sorted.
	resources []string
	// extended are the cluster's DeviceClasses by extended resource name:
	// a pod asking for such a resource is served through them.
	extended map[string][]string
	// before and after are the CEL selectors of the class of each
	// resource (draclass.ClassName): in effect (the cluster's, or those
	// of the current rules) and those of the proposed rules.
	before, after map[string]string
}

// readClasses reads what the DRA resources of the nodes need: nil when
// no node serves anything through DRA, before or after.
func (d *diffRun) readClasses(ctx context.Context, r clusterReader, sides []*nodeSides) (*diffClasses, error) {
	dra := map[string]bool{}
	for _, s := range sides {
		for _, served := range []labeler.Served{s.before, s.after} {
			for _, res := range served.Resources {
				if res.Serve == plan.ServeDRA {
					dra[res.Name] = true
				}
			}
		}
	}
	if len(dra) == 0 {
		return nil, nil
	}
	c := &diffClasses{resources: slices.Sorted(maps.Keys(dra)), extended: map[string][]string{}}
	list, err := r.DeviceClasses(ctx)
	if err != nil {
		return nil, &exitError{code: diffExitIncomplete, err: fmt.Errorf("the DeviceClasses of the resources served through DRA (%s): %w",
			strings.Join(c.resources, ", "), err)}
	}
	cluster := map[string]string{}
	for i := range list {
		dc := &list[i]
		if n := dc.Spec.ExtendedResourceName; n != nil {
			c.extended[*n] = append(c.extended[*n], dc.Name)
		}
		cluster[dc.Name] = classSelector(dc)
	}
	next, err := draclass.CompileCatalog(d.next.rs)
	if err != nil {
		return nil, inputError(fmt.Errorf("the DeviceClasses of %s: %w", d.next.where, err))
	}
	c.after = compiledSelectors(next)
	if d.cur != nil {
		cur, err := draclass.CompileCatalog(d.cur.rs)
		if err != nil {
			return nil, inputError(fmt.Errorf("the DeviceClasses of %s: %w", d.cur.where, err))
		}
		c.before = compiledSelectors(cur)
	} else {
		c.before = map[string]string{}
		for _, res := range c.resources {
			if name, err := draclass.ClassName(res); err == nil {
				if sel, ok := cluster[name]; ok {
					c.before[res] = sel
				}
			}
		}
	}
	return c, nil
}

// classSelector is a DeviceClass's selection as one CEL expression.
func classSelector(dc *resourcev1.DeviceClass) string {
	var exprs []string
	for _, s := range dc.Spec.Selectors {
		if s.CEL != nil {
			exprs = append(exprs, s.CEL.Expression)
		}
	}
	if len(exprs) == 1 {
		return exprs[0]
	}
	for i, e := range exprs {
		exprs[i] = "(" + e + ")"
	}
	return strings.Join(exprs, " && ")
}

// compiledSelectors are the selectors of compiled classes by resource
// (the rules' classes: not NVIDIA's, which NVIDIA compatibility adds).
func compiledSelectors(res *draclass.Result) map[string]string {
	out := make(map[string]string, len(res.Classes))
	for _, cl := range res.Classes {
		if !cl.NVIDIA {
			out[cl.Resource] = cl.Selector
		}
	}
	return out
}

// serves reports whether a DeviceClass of the cluster serves pods that
// ask for the extended resource name.
func (c *diffClasses) serves(resource string) bool {
	return c != nil && len(c.extended[resource]) > 0
}

// unservedReason says why moving a resource to DRA loses it.
func (c *diffClasses) unservedReason(resource string) string {
	return fmt.Sprintf("no DeviceClass in the cluster has extendedResourceName %s: pods asking for it would not be scheduled here", resource)
}

// unservedWarning says that a resource added through DRA is not reachable
// by its extended resource name.
func (c *diffClasses) unservedWarning(resource string) string {
	return fmt.Sprintf("%s is served through DRA, but no DeviceClass in the cluster has it as extendedResourceName: "+
		"pods asking for it are not scheduled here (featureplug dra classes --rules FILE | kubectl apply -f -)", resource)
}

// changes lists the class changes, by resource.
func (c *diffClasses) changes() []diffClassChange {
	if c == nil {
		return nil
	}
	var out []diffClassChange
	for _, res := range c.resources {
		name, err := draclass.ClassName(res)
		if err != nil {
			continue
		}
		from, had := c.before[res]
		to, has := c.after[res]
		ch := diffClassChange{Resource: res, Class: name, From: from, To: to}
		switch {
		case had && has && from == to, !had && !has:
			continue
		case !had:
			ch.Op = opClassAdded
		case !has:
			ch.Op = opClassRemoved
		default:
			ch.Op = opClassChanged
		}
		out = append(out, ch)
	}
	return out
}
