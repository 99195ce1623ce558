package deviceplugin

import (
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxCombinations bounds the exhaustive search over device sets; larger
// searches (more than 8 of 16 GPUs, say) use a seeded greedy search.
const maxCombinations = 20000

// preferred picks size logical devices from available, including every
// mustInclude device, with every device taken as healthy.
func (ds *deviceSet) preferred(available, mustInclude []string, size int, policy ReplicaPolicy) ([]string, error) {
	return ds.pick(available, mustInclude, size, policy, nil)
}

// pick picks size logical devices from available, including every
// mustInclude device. Whole devices are chosen by the highest sum of
// pairwise link scores, then the fewest NUMA nodes, then the lowest
// indexes; replicas follow the replica policy. A device that is Unhealthy
// now (bad[phys]; bad may be nil) is never picked from available, even
// when the kubelet offers it; a must-include device is kept whatever its
// health, since the kubelet ignores an answer without it (Allocate then
// refuses it while it is Unhealthy). It returns InvalidArgument when the
// request cannot be met and FailedPrecondition when only the Unhealthy
// devices keep it from being met. Errors name at most a handful of IDs.
func (ds *deviceSet) pick(available, mustInclude []string, size int, policy ReplicaPolicy, bad []bool) ([]string, error) {
	name := ds.resource.Name
	if len(available) > 2*len(ds.logical)+maxNamedIDs {
		// Far more IDs than the resource has: bound the work on a bogus
		// request before looking at it.
		return nil, status.Errorf(codes.InvalidArgument, "resource %s: request offers %d available device IDs; the resource has %d", name, len(available), len(ds.logical))
	}
	if len(mustInclude) > len(available) {
		return nil, status.Errorf(codes.InvalidArgument, "resource %s: %d must-include device IDs, more than the %d available ones", name, len(mustInclude), len(available))
	}
	inAvail := make([]bool, len(ds.logical))
	nAvail := 0
	var unknown, notAvail idSample
	for _, id := range available {
		i, ok := ds.byID[id]
		switch {
		case !ok:
			unknown.add(id)
		case !inAvail[i]:
			inAvail[i] = true
			nAvail++
		}
	}
	inMust := make([]bool, len(ds.logical))
	var must []int
	for _, id := range mustInclude {
		i, ok := ds.byID[id]
		switch {
		case !ok:
			unknown.add(id)
		case !inAvail[i]:
			notAvail.add(id)
		case !inMust[i]:
			inMust[i] = true
			must = append(must, i)
		}
	}
	nSick := 0
	if bad != nil {
		for i, ok := range inAvail {
			if ok && !inMust[i] && bad[ds.logical[i].phys] {
				inAvail[i] = false
				nSick++
			}
		}
	}
	switch {
	case unknown.n > 0:
		return nil, status.Errorf(codes.InvalidArgument, "resource %s: %s", name, unknown.describe("unknown"))
	case notAvail.n > 0:
		return nil, status.Errorf(codes.InvalidArgument, "resource %s: %s: not among the available ones", name, notAvail.describe("must-include"))
	case size < 1:
		return nil, status.Errorf(codes.InvalidArgument, "resource %s: allocation size %d is less than 1", name, size)
	case size > nAvail:
		return nil, status.Errorf(codes.InvalidArgument, "resource %s: allocation size %d is more than the %d available devices", name, size, nAvail)
	case len(must) > size:
		return nil, status.Errorf(codes.InvalidArgument, "resource %s: %d must-include devices do not fit allocation size %d", name, len(must), size)
	case size > nAvail-nSick:
		return nil, status.Errorf(codes.FailedPrecondition, "resource %s: allocation size %d is more than the %d available healthy devices (%d available devices are Unhealthy)", name, size, nAvail-nSick, nSick)
	}

	var picked []int
	if ds.replicas > 1 {
		picked = ds.pickReplicas(inAvail, inMust, must, size, policy)
	} else {
		picked = ds.pickLinked(inAvail, inMust, must, size)
	}
	slices.Sort(picked)
	out := make([]string, len(picked))
	for i, p := range picked {
		out[i] = ds.logical[p].id
	}
	return out, nil
}

// pickLinked chooses whole devices (logical position == physical position).
func (ds *deviceSet) pickLinked(inAvail, inMust []bool, must []int, size int) []int {
	cand := make([]int, 0, len(inAvail))
	for i, ok := range inAvail {
		if ok && !inMust[i] {
			cand = append(cand, i)
		}
	}
	k := size - len(must)
	if k == 0 {
		return must
	}
	if binomialAtMost(len(cand), k, maxCombinations) {
		s := newLinkSearch(ds, must, cand, size)
		s.exhaustive(0, k, s.baseScore)
		return s.best
	}
	return ds.greedyLinked(must, cand, size)
}

// linkSearch is the state of the exhaustive search.
type linkSearch struct {
	ds        *deviceSet
	cand      []int
	chosen    []int // must, then the picks so far
	numaCnt   []int
	distinct  int
	baseScore int

	best         []int
	bestScore    int
	bestDistinct int
	found        bool
}

func newLinkSearch(ds *deviceSet, must, cand []int, size int) *linkSearch {
	s := &linkSearch{
		ds:      ds,
		cand:    cand,
		chosen:  make([]int, 0, size),
		numaCnt: make([]int, ds.numaCount),
		best:    make([]int, size),
	}
	for _, m := range must {
		for _, c := range s.chosen {
			s.baseScore += ds.score[m][c]
		}
		s.push(m)
	}
	return s
}

func (s *linkSearch) push(i int) {
	s.chosen = append(s.chosen, i)
	n := s.ds.numa[i]
	if s.numaCnt[n] == 0 {
		s.distinct++
	}
	s.numaCnt[n]++
}

func (s *linkSearch) pop() {
	i := s.chosen[len(s.chosen)-1]
	s.chosen = s.chosen[:len(s.chosen)-1]
	n := s.ds.numa[i]
	s.numaCnt[n]--
	if s.numaCnt[n] == 0 {
		s.distinct--
	}
}

// exhaustive visits the combinations of need more candidates from start in
// lexicographic order, keeping the first best one, so ties go to the
// lowest indexes.
func (s *linkSearch) exhaustive(start, need, score int) {
	if need == 0 {
		if !s.found || score > s.bestScore || (score == s.bestScore && s.distinct < s.bestDistinct) {
			s.found = true
			s.bestScore = score
			s.bestDistinct = s.distinct
			copy(s.best, s.chosen)
		}
		return
	}
	row := s.ds.score
	for i := start; i <= len(s.cand)-need; i++ {
		c := s.cand[i]
		add := 0
		for _, x := range s.chosen {
			add += row[c][x]
		}
		s.push(c)
		s.exhaustive(i+1, need-1, score+add)
		s.pop()
	}
}

// greedyLinked grows the set one device at a time, adding the candidate
// with the highest gain (then fewest NUMA nodes, then lowest index), and
// then improves it by swapping single devices while that raises the score.
// Without must-include devices it tries every candidate as the seed and
// keeps the best result.
func (ds *deviceSet) greedyLinked(must, cand []int, size int) []int {
	seeds := [][]int{must}
	if len(must) == 0 {
		seeds = seeds[:0]
		for _, c := range cand {
			seeds = append(seeds, []int{c})
		}
	}
	var best []int
	bestScore, bestDistinct := -1, 0
	for _, seed := range seeds {
		g := ds.newGrowth(size)
		for _, s := range seed {
			g.add(s)
		}
		g.grow(cand, size)
		g.improve(cand, len(must))
		if score, distinct := g.score, g.distinct(); score > bestScore || (score == bestScore && distinct < bestDistinct) {
			best, bestScore, bestDistinct = g.set, score, distinct
		}
	}
	return best
}

// growth is a device set under construction with its score and, for every
// device, the gain of adding it.
type growth struct {
	ds    *deviceSet
	set   []int
	in    []bool
	gain  []int // sum of scores with the devices in set
	score int
}

func (ds *deviceSet) newGrowth(size int) *growth {
	return &growth{
		ds:   ds,
		set:  make([]int, 0, size),
		in:   make([]bool, len(ds.physical)),
		gain: make([]int, len(ds.physical)),
	}
}

func (g *growth) add(i int) {
	g.score += g.gain[i]
	g.set = append(g.set, i)
	g.in[i] = true
	for j := range g.gain {
		g.gain[j] += g.ds.score[j][i]
	}
}

// swap replaces set[pos] with i.
func (g *growth) swap(pos, i int) {
	out := g.set[pos]
	g.score += g.gain[i] - g.ds.score[i][out] - g.gain[out]
	g.set[pos] = i
	g.in[out], g.in[i] = false, true
	for j := range g.gain {
		g.gain[j] += g.ds.score[j][i] - g.ds.score[j][out]
	}
}

// distinct counts the NUMA nodes of the set.
func (g *growth) distinct() int {
	seen := make([]bool, g.ds.numaCount)
	n := 0
	for _, i := range g.set {
		if !seen[g.ds.numa[i]] {
			seen[g.ds.numa[i]] = true
			n++
		}
	}
	return n
}

// grow adds the best candidate until the set has size devices.
func (g *growth) grow(cand []int, size int) {
	numaCnt := make([]int, g.ds.numaCount)
	for _, i := range g.set {
		numaCnt[g.ds.numa[i]]++
	}
	for len(g.set) < size {
		pick, pickNew := -1, false
		for _, c := range cand {
			if g.in[c] {
				continue
			}
			isNew := numaCnt[g.ds.numa[c]] == 0
			if pick == -1 || g.gain[c] > g.gain[pick] || (g.gain[c] == g.gain[pick] && pickNew && !isNew) {
				pick, pickNew = c, isNew
			}
		}
		numaCnt[g.ds.numa[pick]]++
		g.add(pick)
	}
}

// improve makes the best single swap of a non-fixed device (positions from
// fixed on) for a candidate while that raises the score.
func (g *growth) improve(cand []int, fixed int) {
	for {
		bestDelta, bestPos, bestIn := 0, -1, -1
		for pos := fixed; pos < len(g.set); pos++ {
			out := g.set[pos]
			for _, c := range cand {
				if g.in[c] {
					continue
				}
				if d := g.gain[c] - g.ds.score[c][out] - g.gain[out]; d > bestDelta {
					bestDelta, bestPos, bestIn = d, pos, c
				}
			}
		}
		if bestPos < 0 {
			return
		}
		g.swap(bestPos, bestIn)
	}
}

// pickReplicas chooses replicas: must-include ones first, then one replica
// at a time from the physical device the policy prefers.
func (ds *deviceSet) pickReplicas(inAvail, inMust []bool, must []int, size int, policy ReplicaPolicy) []int {
	np, r := len(ds.physical), ds.replicas
	availCnt := make([]int, np)
	remain := make([]int, np)
	chosen := make([]int, np)
	for i, ok := range inAvail {
		if ok {
			p := ds.logical[i].phys
			availCnt[p]++
			if !inMust[i] {
				remain[p]++
			}
		}
	}
	out := append(make([]int, 0, size), must...)
	for _, m := range must {
		chosen[ds.logical[m].phys]++
	}
	next := make([]int, np)
	for len(out) < size {
		best := -1
		for p := range np {
			if remain[p] == 0 {
				continue
			}
			if best == -1 || ds.replicaBetter(policy, p, best, chosen, availCnt) {
				best = p
			}
		}
		for next[best] < r {
			i := best*r + next[best]
			next[best]++
			if inAvail[i] && !inMust[i] {
				out = append(out, i)
				break
			}
		}
		remain[best]--
		chosen[best]++
	}
	return out
}

// replicaBetter reports whether physical device p is preferred over q for
// the next replica. used counts replicas allocated to other containers.
func (ds *deviceSet) replicaBetter(policy ReplicaPolicy, p, q int, chosen, availCnt []int) bool {
	usedP, usedQ := ds.replicas-availCnt[p], ds.replicas-availCnt[q]
	if policy == ReplicasPacked {
		if chosen[p] != chosen[q] {
			return chosen[p] > chosen[q]
		}
		return usedP > usedQ
	}
	if chosen[p] != chosen[q] {
		return chosen[p] < chosen[q]
	}
	return usedP < usedQ
}

// binomialAtMost reports whether n choose k is at most limit.
func binomialAtMost(n, k, limit int) bool {
	if k > n-k {
		k = n - k
	}
	c := 1
	for i := 1; i <= k; i++ {
		c = c * (n - k + i) / i
		if c > limit {
			return false
		}
	}
	return true
}
