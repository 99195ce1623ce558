package plan

// Serve is the kubelet API a resource is served through. A device is
// served through exactly one: the sinks of the other API leave it alone.
type Serve string

// The APIs a resource can be served through.
const (
	// ServeDevicePlugin is the kubelet's device-plugin API (one gRPC
	// server per resource name).
	ServeDevicePlugin Serve = "device-plugin"
	// ServeDRA is Dynamic Resource Allocation: the devices are published
	// in ResourceSlices of driver gpu.featureplug.io and prepared through
	// the kubelet's DRA plugin API.
	ServeDRA Serve = "dra"
)

// WithServeDefault returns p with the API of every resource whose rules
// did not choose one set to def: the one place the agent's default
// (--serve) is applied, so that every sink reads Resource.Serve. The VFIO
// resources, served through device plugins unless their rule says dra
// (KubeVirt's permittedHostDevices consumes them so), get
// ServeDevicePlugin whatever def is. It returns p itself when every resource has its API
// already (nil for nil).
func (p *Plan) WithServeDefault(def Serve) *Plan {
	if p == nil {
		return nil
	}
	missing := false
	for _, list := range [][]Resource{p.Resources, p.VFIO} {
		for i := range list {
			missing = missing || list[i].Serve == ""
		}
	}
	if !missing {
		return p
	}
	out := *p
	out.Resources = withServe(p.Resources, def)
	out.VFIO = withServe(p.VFIO, ServeDevicePlugin)
	return &out
}

// withServe returns a copy of list with def as the API of the resources
// that have none (nil for nil).
func withServe(list []Resource, def Serve) []Resource {
	if list == nil {
		return nil
	}
	out := make([]Resource, len(list))
	for i, r := range list {
		if r.Serve == "" {
			r.Serve = def
		}
		out[i] = r
	}
	return out
}

// ServedBy returns the API the resource is served through, given the
// agent's default for resources whose rules did not choose: Serve itself
// in a plan WithServeDefault made, which is what every sink is given.
func (r *Resource) ServedBy(def Serve) Serve {
	if r.Serve != "" {
		return r.Serve
	}
	return def
}

// ServedThrough returns the part of p served through api, given the
// agent's default def for resources whose rules did not choose (none left
// in a plan WithServeDefault made; the VFIO resources' default is always
// ServeDevicePlugin): p without the other API's resources, or p itself
// when it has none (nil for nil).
func (p *Plan) ServedThrough(api, def Serve) *Plan {
	return p.filter(func(r *Resource) bool { return r.ServedBy(def) == api },
		func(r *Resource) bool { return r.ServedBy(ServeDevicePlugin) == api })
}

// Serving returns the part of p that api serves now: its resources of
// that API that are not held back, the VFIO resources of that API
// among them (still apart, in Plan.VFIO).
func (p *Plan) Serving(api Serve) *Plan {
	keep := func(r *Resource) bool { return r.Serve == api && r.Held == "" }
	return p.filter(keep, keep)
}

// filter returns p with only the resources keep takes and the VFIO
// resources keepVFIO takes, or p itself when they take them all (nil for
// nil).
func (p *Plan) filter(keep, keepVFIO func(*Resource) bool) *Plan {
	if p == nil {
		return nil
	}
	resources, sameR := filterResources(p.Resources, keep)
	vfio, sameV := filterResources(p.VFIO, keepVFIO)
	if sameR && sameV {
		return p
	}
	out := *p
	out.Resources, out.VFIO = resources, vfio
	return &out
}

// filterResources returns the resources of list keep takes, and whether
// that is all of them (list itself is returned then).
func filterResources(list []Resource, keep func(*Resource) bool) ([]Resource, bool) {
	n := 0
	for i := range list {
		if keep(&list[i]) {
			n++
		}
	}
	if n == len(list) {
		return list, true
	}
	out := make([]Resource, 0, n)
	for i := range list {
		if keep(&list[i]) {
			out = append(out, list[i])
		}
	}
	return out, false
}

// WithHeld returns p with the resources named in held (resource name ->
// why) held back, and every other resource served: p itself when that
// changes nothing (nil for nil).
func (p *Plan) WithHeld(held map[string]string) *Plan {
	if p == nil {
		return nil
	}
	same := true
	for i := range p.Resources {
		same = same && p.Resources[i].Held == held[p.Resources[i].Name]
	}
	if same {
		return p
	}
	out := *p
	out.Resources = make([]Resource, len(p.Resources))
	for i, r := range p.Resources {
		r.Held = held[r.Name]
		out.Resources[i] = r
	}
	return &out
}

// DrainsNode reports whether next, replacing last, would take away every
// device last advertises without the rules saying so: last advertises a
// device and next fails CheckServes. A rules file truncated or emptied by
// mistake must not drain a node, so the agent refuses such a reload and
// keeps last, as `rules check` refuses such a file.
func DrainsNode(last, next *Plan) bool {
	return last.advertises() && next != nil && next.CheckServes() != nil
}

// advertises reports whether p gives a resource at least one device: a
// GPU or MIG device, a VFIO device, or GPUs partitioned on demand.
func (p *Plan) advertises() bool {
	if p == nil {
		return false
	}
	if len(p.DynamicMIG) > 0 {
		return true
	}
	for _, list := range [][]Resource{p.Resources, p.VFIO} {
		for i := range list {
			if len(list[i].Devices) > 0 {
				return true
			}
		}
	}
	return false
}
