package migplace

// EngineKind names a kind of engine a GPU instance holds.
type EngineKind string

// The engine kinds, in the order they are listed.
const (
	EngineCopy    EngineKind = "copy"
	EngineDecoder EngineKind = "decoder"
	EngineEncoder EngineKind = "encoder"
	EngineJPEG    EngineKind = "jpeg"
	EngineOFA     EngineKind = "ofa"
)

// EngineKinds lists every engine kind.
func EngineKinds() []EngineKind {
	return []EngineKind{EngineCopy, EngineDecoder, EngineEncoder, EngineJPEG, EngineOFA}
}

// Count returns how many engines of kind k e holds.
func (e Engines) Count(k EngineKind) int {
	switch k {
	case EngineCopy:
		return e.Copy
	case EngineDecoder:
		return e.Decoder
	case EngineEncoder:
		return e.Encoder
	case EngineJPEG:
		return e.JPEG
	case EngineOFA:
		return e.OFA
	}
	return 0
}

// ScarceEngines returns the engine kinds that limit how the profiles can
// be laid out on a GPU of the given capacity: those some set of
// placements fitting the memory and compute slices would take more of than
// the GPU holds. The +me profile's OFA (and, on A100, JPEG) is one: one
// GPU holds one, so two +me instances never fit. A counter for any other
// kind would never refuse a layout, so the partitionable-device model
// publishes only these.
func ScarceEngines(profiles []Profile, capacity Counters) []EngineKind {
	type cand struct {
		mask    uint32
		compute int
		engines Engines
	}
	var cands []cand
	for i := range profiles {
		p := &profiles[i]
		for _, pl := range p.Placements {
			cands = append(cands, cand{mask: pl.Mask(), compute: p.ComputeSlices, engines: p.Engines})
		}
	}
	most := map[EngineKind]int{}
	var walk func(from int, mask uint32, compute int, sum Engines)
	walk = func(from int, mask uint32, compute int, sum Engines) {
		for _, k := range EngineKinds() {
			most[k] = max(most[k], sum.Count(k))
		}
		for i := from; i < len(cands); i++ {
			c := cands[i]
			if c.mask&mask != 0 || compute+c.compute > capacity.ComputeSlices {
				continue
			}
			walk(i+1, mask|c.mask, compute+c.compute, Engines{
				Copy: sum.Copy + c.engines.Copy, Decoder: sum.Decoder + c.engines.Decoder, Encoder: sum.Encoder + c.engines.Encoder,
				JPEG: sum.JPEG + c.engines.JPEG, OFA: sum.OFA + c.engines.OFA,
			})
		}
	}
	walk(0, 0, 0, Engines{})
	var out []EngineKind
	for _, k := range EngineKinds() {
		if most[k] > capacity.Engines.Count(k) {
			out = append(out, k)
		}
	}
	return out
}
