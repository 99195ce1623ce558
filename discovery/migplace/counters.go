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
// be laid out on a GPU of the given capacity: a set of placements that
// fits the memory and compute slices, and the other kinds returned, would
// take more of the kind than the GPU holds. The +me profile's OFA is one:
// one GPU holds one, so two +me instances never fit. A counter for any
// other kind would never refuse a layout those counters allow, so the
// partitionable-device model publishes only these. Of kinds that limit
// the same layouts (the A100's JPEG and OFA, both only on +me and 7g) the
// later in EngineKinds is kept.
func ScarceEngines(profiles []Profile, capacity Counters) []EngineKind {
	var cands []candidate
	for i := range profiles {
		p := &profiles[i]
		for _, pl := range p.Placements {
			cands = append(cands, candidate{mask: pl.Mask(), compute: p.ComputeSlices, engines: p.Engines})
		}
	}
	var kept []EngineKind
	for _, k := range EngineKinds() {
		if mostOf(cands, capacity, k, nil) > capacity.Engines.Count(k) {
			kept = append(kept, k)
		}
	}
	// Drop a kind the others already limit enough, one at a time.
	for i := 0; i < len(kept); {
		if mostOf(cands, capacity, kept[i], slicesWithout(kept, i)) <= capacity.Engines.Count(kept[i]) {
			kept = slicesWithout(kept, i)
			continue
		}
		i++
	}
	return kept
}

// candidate is one placement of one profile, for ScarceEngines.
type candidate struct {
	mask    uint32
	compute int
	engines Engines
}

// mostOf is the most engines of kind k a set of candidates takes that fits
// the capacity's memory and compute slices and its engines of the kinds
// enforced.
func mostOf(cands []candidate, capacity Counters, k EngineKind, enforced []EngineKind) int {
	most := 0
	var walk func(from int, mask uint32, compute int, sum Engines)
	walk = func(from int, mask uint32, compute int, sum Engines) {
		most = max(most, sum.Count(k))
		for i := from; i < len(cands); i++ {
			c := cands[i]
			if c.mask&mask != 0 || compute+c.compute > capacity.ComputeSlices {
				continue
			}
			next := Engines{
				Copy: sum.Copy + c.engines.Copy, Decoder: sum.Decoder + c.engines.Decoder, Encoder: sum.Encoder + c.engines.Encoder,
				JPEG: sum.JPEG + c.engines.JPEG, OFA: sum.OFA + c.engines.OFA,
			}
			fits := true
			for _, e := range enforced {
				fits = fits && next.Count(e) <= capacity.Engines.Count(e)
			}
			if fits {
				walk(i+1, mask|c.mask, compute+c.compute, next)
			}
		}
	}
	walk(0, 0, 0, Engines{})
	return most
}

// slicesWithout returns kinds without its i-th element, in a new slice.
func slicesWithout(kinds []EngineKind, i int) []EngineKind {
	out := make([]EngineKind, 0, len(kinds)-1)
	out = append(out, kinds[:i]...)
	return append(out, kinds[i+1:]...)
}
