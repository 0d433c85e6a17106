"""fwd_order_sim.py: the sm90 forward's causal tile orders simulated (no GPU): 132 CTAs, a tile of
query block b costing b + 1 key blocks plus 1.5 of fixed cost; per order the makespan, the balance
(mean CTA time / makespan) and how many (head, batch) pairs have a tile in flight (their K/V is
the L2 working set). Orders: static block-major with snake rounds (today's for > 16 query blocks),
static pair-major, static bands of G pairs, and the dynamic counter order with sections of G pairs
(longest first within; today's for <= 16 query blocks). kernel_notes_fwd_sm90.md, "The causal order
and L2" (session 18).

    python3 scripts/dev/fwd_order_sim.py
"""

import heapq
def sim(nb, pairs, ctas=132, order="block", overhead=1.5):
    tiles=nb*pairs
    def tile(lin):
        if order=="block":
            b = nb-1 - lin//pairs; p = lin%pairs
        else:
            p = lin//nb; b = nb-1 - lin%nb
        return p,b
    # snake rounds static
    work=[0.0]*ctas; events=[]
    for c in range(ctas):
        t=0.0; r=0; lin=c
        while lin < tiles:
            p,b=tile(lin); L=b+1+overhead
            events.append((t,t+L,p)); t+=L
            r+=1; base=r*ctas
            lin = base + (ctas-1-c if (r&1) else c)
        work[c]=t
    mk=max(work); avg=sum(work)/ctas
    # distinct pairs active at sample times
    import statistics
    samples=[]
    for k in range(1,50):
        tt=mk*k/50
        act={p for (a,b_,p) in events if a<=tt<b_}
        samples.append(len(act))
    return mk, avg/mk, statistics.median(samples), max(samples)
for S,blockm in ((4096,128),(8192,128),(16384,128),(8192,192),(16384,192)):
    nb=(S+blockm-1)//blockm; pairs=(16384//S)*(2048//(128 if blockm==128 else 64))
    for order in ("block","pair"):
        mk,eff,med,mx=sim(nb,pairs,order=order)
        print(f"S {S} M {blockm} nb {nb} pairs {pairs} {order:5s} makespan {mk:7.1f} balance {eff:.3f} pairs-in-flight median {med} max {mx}")
print("--- bands")
def sim2(nb,pairs,G,ctas=132,overhead=1.5):
    tiles=nb*pairs
    def tile(lin):
        per=G*nb; band=lin//per; first=band*G; size=min(G,pairs-first); within=lin-band*per
        b=nb-1-within//size; p=first+within%size
        return p,b
    work=[0.0]*ctas; events=[]
    for c in range(ctas):
        t=0.0; r=0; lin=c
        while lin<tiles:
            p,b=tile(lin); L=b+1+overhead; events.append((t,t+L,p)); t+=L
            r+=1; lin=r*ctas+(ctas-1-c if (r&1) else c)
        work[c]=t
    mk=max(work); avg=sum(work)/ctas
    import statistics
    s=[len({p for (a,b_,p) in events if a<=mk*k/50<b_}) for k in range(1,50)]
    return mk,avg/mk,statistics.median(s),max(s)
for S,blockm in ((4096,128),(8192,128),(16384,128),(8192,192),(16384,192)):
    nb=(S+blockm-1)//blockm; pairs=(16384//S)*(2048//(128 if blockm==128 else 64))
    for G in (2,4,8):
        mk,eff,med,mx=sim2(nb,pairs,G)
        print(f"S {S} M {blockm} G {G} makespan {mk:7.1f} balance {eff:.3f} pairs-in-flight median {med} max {mx}")
print("--- dynamic (counter) sections, longest first within")
def sim3(nb,pairs,G,ctas=132,overhead=1.5):
    tiles=nb*pairs
    def tile(lin):
        per=G*nb; band=lin//per; first=band*G; size=min(G,pairs-first); within=lin-band*per
        return first+within%size, nb-1-within//size
    heap=[(0.0,c) for c in range(ctas)]; nxt=0; events=[]; end=0
    while nxt<tiles:
        t,c=heapq.heappop(heap); p,b=tile(nxt); nxt+=1; L=b+1+overhead
        events.append((t,t+L,p)); heapq.heappush(heap,(t+L,c)); end=max(end,t+L)
    total=sum(b_-a for a,b_,p in events)
    import statistics
    s=[len({p for (a,b_,p) in events if a<=end*k/50<b_}) for k in range(1,50)]
    return end,total/ctas/end,statistics.median(s),max(s)
for S,blockm in ((4096,128),(8192,128),(16384,128),(8192,192),(16384,192)):
    nb=(S+blockm-1)//blockm; pairs=(16384//S)*(2048//(128 if blockm==128 else 64))
    for G in (1,2,4,8,pairs):
        mk,eff,med,mx=sim3(nb,pairs,G)
        print(f"S {S} M {blockm} G {G} makespan {mk:7.1f} balance {eff:.3f} pairs-in-flight median {med} max {mx}")
