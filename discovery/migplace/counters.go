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
	kinds := EngineKinds()
	var cands []candidate
	for i := range profiles {
		p := &profiles[i]
		var e [numEngineKinds]int
		for k, kind := range kinds {
			e[k] = p.Engines.Count(kind)
		}
		for _, pl := range p.Placements {
			cands = append(cands, candidate{mask: pl.Mask(), compute: p.ComputeSlices, engines: e})
		}
	}
	var limit [numEngineKinds]int
	for k, kind := range kinds {
		limit[k] = capacity.Engines.Count(kind)
	}
	var kept []int
	most := mostOf(cands, capacity.ComputeSlices, limit, nil)
	for k := range kinds {
		if most[k] > limit[k] {
			kept = append(kept, k)
		}
	}
	// Drop a kind the others already limit enough, one at a time.
	for i := 0; i < len(kept); {
		others := append(append([]int(nil), kept[:i]...), kept[i+1:]...)
		if mostOf(cands, capacity.ComputeSlices, limit, others)[kept[i]] <= limit[kept[i]] {
			kept = others
			continue
		}
		i++
	}
	out := make([]EngineKind, len(kept))
	for i, k := range kept {
		out[i] = kinds[k]
	}
	return out
}

// numEngineKinds is len(EngineKinds()).
const numEngineKinds = 5

// candidate is one placement of one profile, for ScarceEngines; engines
// are counted in EngineKinds order.
type candidate struct {
	mask    uint32
	compute int
	engines [numEngineKinds]int
}

// mostOf returns, per engine kind, the most engines a set of candidates
// takes that fits the compute slices, does not overlap, and keeps the
// enforced kinds (indexes into EngineKinds) within their limits.
func mostOf(cands []candidate, compute int, limit [numEngineKinds]int, enforced []int) [numEngineKinds]int {
	var most [numEngineKinds]int
	var walk func(from int, mask uint32, used int, sum [numEngineKinds]int)
	walk = func(from int, mask uint32, used int, sum [numEngineKinds]int) {
		for k := range most {
			most[k] = max(most[k], sum[k])
		}
		for i := from; i < len(cands); i++ {
			c := &cands[i]
			if c.mask&mask != 0 || used+c.compute > compute {
				continue
			}
			next := sum
			for k := range next {
				next[k] += c.engines[k]
			}
			fits := true
			for _, k := range enforced {
				fits = fits && next[k] <= limit[k]
			}
			if fits {
				walk(i+1, mask|c.mask, used+c.compute, next)
			}
		}
	}
	walk(0, 0, 0, [numEngineKinds]int{})
	return most
}
