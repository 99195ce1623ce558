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
// (--serve) is applied, so that every sink reads Resource.Serve. It
// returns p itself when every resource has its API already (nil for nil).
func (p *Plan) WithServeDefault(def Serve) *Plan {
	if p == nil {
		return nil
	}
	missing := false
	for i := range p.Resources {
		missing = missing || p.Resources[i].Serve == ""
	}
	if !missing {
		return p
	}
	out := *p
	out.Resources = make([]Resource, len(p.Resources))
	for i, r := range p.Resources {
		if r.Serve == "" {
			r.Serve = def
		}
		out.Resources[i] = r
	}
	return &out
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
// in a plan WithServeDefault made): p without the other API's resources,
// or p itself when it has none (nil for nil).
func (p *Plan) ServedThrough(api, def Serve) *Plan {
	return p.filter(func(r *Resource) bool { return r.ServedBy(def) == api })
}

// Serving returns the part of p that api serves now: its resources of
// that API that are not held back.
func (p *Plan) Serving(api Serve) *Plan {
	return p.filter(func(r *Resource) bool { return r.Serve == api && r.Held == "" })
}

// filter returns p with only the resources keep takes, or p itself when
// it takes them all (nil for nil).
func (p *Plan) filter(keep func(*Resource) bool) *Plan {
	if p == nil {
		return nil
	}
	n := 0
	for i := range p.Resources {
		if keep(&p.Resources[i]) {
			n++
		}
	}
	if n == len(p.Resources) {
		return p
	}
	out := *p
	out.Resources = make([]Resource, 0, n)
	for i := range p.Resources {
		if keep(&p.Resources[i]) {
			out.Resources = append(out.Resources, p.Resources[i])
		}
	}
	return &out
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
