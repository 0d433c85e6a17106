# exact_delta_lanes_emulation.py (session 53, no device machine): cuda/common/bwd_prepost.cuh's
# exact_delta_store lane by lane in numpy, from the m16n8 C layout of S and dP (row g / g + 8, key
# 8n + 2t + j), with its shuffles (xor 1, 2), masks (BlockMask's lo / hi), row validity and the
# caller's per-warp delta offset, against delta = sum_j w_j dP_j / sum_j w_j over the visible keys.
# It found the first draft writing every warp's rows at the CTA's first 16. Prints the largest
# difference per case (float32 rounding: <= ~1e-7). Run: python3 scripts/dev/exact_delta_lanes_emulation.py
# Emulates exact_delta_store's lanes from the m16n8 C layout (row g / g+8, col 2t+j) of S and dP.
import numpy as np
rng = np.random.default_rng(0)
def run(rows_total, sk, lo, hi, scale_log2):
    S = rng.standard_normal((64, 16)).astype(np.float32); DP = rng.standard_normal((64,16)).astype(np.float32)
    delta = np.full(64, np.nan, np.float32)
    for warp in range(4):
        rows = rows_total - warp*16
        base = warp*16
        # per lane fragments
        frag_s = {}; frag_dp = {}
        for lane in range(32):
            g, t = lane//4, lane%4
            sv = [0]*8; dv=[0]*8
            for n in range(2):
                for e in range(4):
                    r = base + g + 8*(e//2); c = 8*n + 2*t + e%2
                    sv[4*n+e] = S[r, c]; dv[4*n+e] = DP[r, c]
            frag_s[lane]=sv; frag_dp[lane]=dv
        for half in range(2):
            m = {}; xs={}; ds={}
            for lane in range(32):
                g, t = lane//4, lane%4
                r = base + g + 8*half
                begin = max(0, r+lo); end = min(sk, r+hi)
                x=[0]*4; d=[0]*4; mm=-np.inf
                for n in range(2):
                    for j in range(2):
                        e = 4*n + 2*half + j; key = 8*n + 2*t + j
                        x[2*n+j] = frag_s[lane][e]*scale_log2 if begin <= key < end else -np.inf
                        d[2*n+j] = frag_dp[lane][e]; mm = max(mm, x[2*n+j])
                xs[lane]=x; ds[lane]=d; m[lane]=mm
            m1 = {l: max(m[l], m[l^1]) for l in range(32)}; m2 = {l: max(m1[l], m1[l^2]) for l in range(32)}
            num={}; den={}
            for lane in range(32):
                x=xs[lane]; d=ds[lane]; mm=m2[lane]
                w=[0.0 if xx==-np.inf else (1.0 if xx==mm else 2.0**(xx-mm)) for xx in x]
                wd=[0.0 if ww==0 else ww*dd for ww,dd in zip(w,d)]
                num[lane]=(wd[0]+wd[1])+(wd[2]+wd[3]); den[lane]=(w[0]+w[1])+(w[2]+w[3])
            n1={l:num[l]+num[l^1] for l in range(32)}; d1={l:den[l]+den[l^1] for l in range(32)}
            n2={l:n1[l]+n1[l^2] for l in range(32)}; d2={l:d1[l]+d1[l^2] for l in range(32)}
            for lane in range(32):
                g,t=lane//4,lane%4; local=g+8*half
                if t==0 and local<rows: delta[base+local] = n2[lane]/d2[lane] if d2[lane]>0 else 0.0
    # expected
    exp = np.full(64, np.nan)
    for r in range(rows_total):
        begin=max(0,r+lo); end=min(sk,r+hi)
        if begin>=end: exp[r]=0; continue
        x=S[r,begin:end]*scale_log2; w=2.0**(x-x.max()); exp[r]=(w*DP[r,begin:end]).sum()/w.sum()
    err = np.nanmax(np.abs(delta[:rows_total]-exp[:rows_total])); assert np.isnan(delta[rows_total:]).all()
    return err
U=1<<30
for args in [(64,16,-U,U,0.18),(33,2,-U,U,0.18),(50,7,-U,1,0.3),(64,16,-(16-64)-0,(16-64)+1,0.2),(5,1,-U,U,1.0),(64,9,3-2,3+1,0.5)]:
    print(args, run(*args))
