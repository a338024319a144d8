#!/usr/bin/env python3
"""Lane-level emulation of ops/cuda/kernels/flash.cu's flash2_body on the CPU.

Checks the kernel's indexing without a card: ldmatrix.x4 and
mma.m16n8k16 as the PTX ISA defines their fragments, the fragment rings
(FA2_AHEAD), the split warps' exchange of partial scores, the masks and the
epilogue, phase by phase between the kernel's two __syncthreads a tile,
against a float64 reference of attention. The index formulas are copied
from flash.cu by hand: change them here with the kernel. Needs numpy
(Debian's python3-numpy). Run: python3 tools/flash_emu.py
"""
import math

import numpy as np
L=np.arange(32); G_=L>>2; T_=L&3

def ldsm4(sm, addr):  # addr: [32] half indices; returns 4 regs, each [32,2] f16
    regs=[]
    for j in range(4):
        rows=addr[8*j:8*j+8]
        M=np.stack([sm[a:a+8] for a in rows])  # 8x8
        regs.append(np.stack([M[G_,2*T_],M[G_,2*T_+1]],axis=1))
    return regs

def mma(c, a, b):  # c [32,4] f32, a 4 regs, b 2 regs
    A=np.zeros((16,16)); B=np.zeros((16,8))
    A[G_,2*T_]=a[0][:,0]; A[G_,2*T_+1]=a[0][:,1]
    A[G_+8,2*T_]=a[1][:,0]; A[G_+8,2*T_+1]=a[1][:,1]
    A[G_,2*T_+8]=a[2][:,0]; A[G_,2*T_+9]=a[2][:,1]
    A[G_+8,2*T_+8]=a[3][:,0]; A[G_+8,2*T_+9]=a[3][:,1]
    B[2*T_,G_]=b[0][:,0]; B[2*T_+1,G_]=b[0][:,1]
    B[2*T_+8,G_]=b[1][:,0]; B[2*T_+9,G_]=b[1][:,1]
    C=A@B
    c[:,0]+=C[G_,2*T_]; c[:,1]+=C[G_,2*T_+1]; c[:,2]+=C[G_+8,2*T_]; c[:,3]+=C[G_+8,2*T_+1]

def f16(x): return np.clip(x,-65504,65504).astype(np.float16)

def run(D,BN,W,SPLIT,AH,q,k,v,heads,kvh,d,cap,window,ring,pos,used,scale):
    rows=q.shape[0]; FA_PAD=64
    jBase=max(0,pos-window+1) if window>0 else 0
    nk=(cap+2*64-1)//64*64
    jEnd=pos+used
    kh=np.zeros((kvh,nk,D),np.float16); vt=np.zeros((kvh,D,nk),np.float16)
    for h in range(kvh):
        for i in range(min(nk, jEnd-jBase+FA_PAD)):
            j=jBase+i
            if j<jEnd:
                row=j%cap if ring else j
                kh[h,i,:d]=f16(k[row,h*d:(h+1)*d]); vt[h,:d,i]=f16(v[row,h*d:(h+1)*d])
    BM=16*W//SPLIT; DH=D//SPLIT; LQ=D+8; LV=BN+8; AR=AH+1
    G=heads//kvh; PB=BM//G
    y=np.full((rows,heads*d),np.nan)
    nblk=(rows+PB-1)//PB
    for hk in range(kvh):
      for bx in range(nblk):
        r0=(nblk-1-bx)*PB; rEnd=min(used,r0+PB); rLim=min(rows,r0+PB)
        if r0>=used:
            y[r0:rLim, hk*G*d:(hk+1)*G*d]=0; continue
        pFirst=pos+r0; pLast=pos+rEnd-1
        jLo=max(0,pFirst-window+1) if window>0 else 0
        iStart=(jLo-jBase)&~7
        tiles=(pLast-jBase-iStart)//BN+1
        sm=np.zeros(BM*LQ+BN*LQ+D*LV,np.float16); oQ=0;oK=BM*LQ;oV=oK+BN*LQ
        sX=np.zeros((W,BN//8,32,4),np.float32)
        def load_k(i0): sm[oK:oK+BN*LQ].reshape(BN,LQ)[:,:D]=kh[hk,i0:i0+BN,:]
        def load_v(i0): sm[oV:oV+D*LV].reshape(D,LV)[:,:BN]=vt[hk,:,i0:i0+BN]
        load_k(iStart)
        Q=sm[oQ:oQ+BM*LQ].reshape(BM,LQ)
        for m in range(BM):
            r=r0+m//G
            if m<PB*G and r<rEnd: Q[m,:d]=f16(q[r,(hk*G+m%G)*d:(hk*G+m%G+1)*d])
        sl2=np.float32(scale*1.4426950408889634)
        st_=[]
        for w in range(W):
            rg=w//SPLIT; hf=w%SPLIT
            mA=rg*16+G_; mB=mA+8
            pA=np.where((mA<PB*G)&(r0+mA//G<rEnd),pos+r0+mA//G,-1)
            pB=np.where((mB<PB*G)&(r0+mB//G<rEnd),pos+r0+mB//G,-1)
            loA=pA-window+1 if window>0 else np.zeros(32,int); loB=pB-window+1 if window>0 else np.zeros(32,int)
            bRow=(L&7)+8*(L>>4); bCol=8*((L>>3)&1)
            st_.append(dict(rg=rg,hf=hf,mA=mA,mB=mB,pA=pA,pB=pB,loA=loA,loB=loB,
                mxA=np.full(32,-1e30,np.float32),mxB=np.full(32,-1e30,np.float32),lA=np.zeros(32,np.float32),lB=np.zeros(32,np.float32),
                o=np.zeros((DH//8,32,4),np.float32),
                qa=oQ+(rg*16+(L&15))*LQ+8*(L>>4)+hf*DH, kb=oK+bRow*LQ+bCol+hf*DH, vb=oV+(hf*DH+bRow)*LV+bCol))
        for t in range(tiles):
            i0=iStart+t*BN; j0=jBase+i0
            load_v(i0)
            for w in range(W):  # phase 1: QK
                S=st_[w]; s=np.zeros((BN//8,32,4),np.float32)
                NP=BN//16; STEPS=(DH//16)*NP; fa=[None,None]; fb=[None]*AR
                for st in range(STEPS+AH):
                    ld=st; use=st-AH
                    if ld<STEPS:
                        kk,np_=divmod(ld,NP)
                        if np_==0: fa[kk&1]=ldsm4(sm,S['qa']+16*kk)
                        fb[ld%AR]=ldsm4(sm,S['kb']+16*np_*LQ+16*kk)
                    if use>=0:
                        kk,np_=divmod(use,NP); c=use%AR
                        mma(s[2*np_],fa[kk&1],fb[c][0:2]); mma(s[2*np_+1],fa[kk&1],fb[c][2:4])
                S['s']=s
                if SPLIT==2: sX[w]=s
            if t+1<tiles: load_k(i0+BN)
            for w in range(W):  # phase 2
                S=st_[w]; s=S['s']
                if SPLIT==2: s=s+sX[w^1]
                whole=(j0+BN-1<=pFirst) and (window<=0 or j0>pLast-window)
                jt=j0+2*T_
                x=np.empty_like(s)
                for n in range(BN//8):
                    for e in range(4):
                        j=jt+8*n+(e&1)
                        ok=((j>=S['loA'])&(j<=S['pA'])) if e<2 else ((j>=S['loB'])&(j<=S['pB']))
                        if whole: ok=np.ones(32,bool)
                        x[n,:,e]=np.where(ok,s[n,:,e]*sl2,np.float32(-1e30))
                tA=x[:,:,0:2].max(axis=(0,2)); tB=x[:,:,2:4].max(axis=(0,2))
                tA=tA.reshape(8,4).max(axis=1).repeat(4); tB=tB.reshape(8,4).max(axis=1).repeat(4)
                nA=np.maximum(S['mxA'],tA); nB=np.maximum(S['mxB'],tB)
                cA=np.exp2(S['mxA']-nA); cB=np.exp2(S['mxB']-nB)
                S['mxA']=nA; S['mxB']=nB
                p=np.empty_like(x)
                p[:,:,0:2]=np.where(x[:,:,0:2]<=-1e29,0,np.exp2(x[:,:,0:2]-nA[None,:,None]))
                p[:,:,2:4]=np.where(x[:,:,2:4]<=-1e29,0,np.exp2(x[:,:,2:4]-nB[None,:,None]))
                S['lA']=S['lA']*cA+p[:,:,0:2].sum(axis=(0,2)); S['lB']=S['lB']*cB+p[:,:,2:4].sum(axis=(0,2))
                o=S['o']; o[:,:,0:2]*=cA[None,:,None]; o[:,:,2:4]*=cB[None,:,None]
                ph=f16(p)
                pf=[]
                for kk in range(BN//16):
                    pf.append([ph[2*kk][:,0:2],ph[2*kk][:,2:4],ph[2*kk+1][:,0:2],ph[2*kk+1][:,2:4]])
                NP=DH//16; STEPS=(BN//16)*NP; fb=[None]*AR
                for st in range(STEPS+AH):
                    ld=st; use=st-AH
                    if ld<STEPS:
                        kk,np_=divmod(ld,NP); fb[ld%AR]=ldsm4(sm,S['vb']+16*np_*LV+16*kk)
                    if use>=0:
                        kk,np_=divmod(use,NP); c=use%AR
                        mma(o[2*np_],pf[kk],fb[c][0:2]); mma(o[2*np_+1],pf[kk],fb[c][2:4])
        for w in range(W):  # epilogue (fa_finish, fa_put)
            S=st_[w]; hf=S['hf']
            lA=S['lA'].reshape(8,4).sum(axis=1).repeat(4); lB=S['lB'].reshape(8,4).sum(axis=1).repeat(4)
            iA=np.where(lA>0,1/np.where(lA>0,lA,1),0); iB=np.where(lB>0,1/np.where(lB>0,lB,1),0)
            for n in range(DH//8):
                c=hf*DH+2*T_+8*n
                for (m,vals) in ((S['mA'],(S['o'][n,:,0]*iA,S['o'][n,:,1]*iA)),(S['mB'],(S['o'][n,:,2]*iB,S['o'][n,:,3]*iB))):
                    for l in range(32):
                        r=r0+m[l]//G
                        if m[l]>=PB*G or r>=rLim: continue
                        live=r<rEnd; h=hk*G+m[l]%G
                        for e in range(2):
                            if c[l]+e<d: y[r,h*d+c[l]+e]=vals[e][l] if live else 0
    return y

def ref(q,k,v,heads,kvh,d,cap,window,ring,pos,used,scale):
    rows=q.shape[0]; G=heads//kvh; y=np.zeros((rows,heads*d))
    for r in range(used):
        p=pos+r; lo=max(0,p-window+1) if window>0 else 0
        js=np.arange(lo,p+1); rr=js%cap if ring else js
        for h in range(heads):
            hk=h//G
            K=k[rr,hk*d:(hk+1)*d]; V=v[rr,hk*d:(hk+1)*d]
            sc=K@q[r,h*d:(h+1)*d]*scale; sc=np.exp(sc-sc.max()); sc/=sc.sum()
            y[r,h*d:(h+1)*d]=sc@V
    return y

rng=np.random.default_rng(1)
def case(D,BN,W,SPLIT,AH,heads,kvh,d,rows,pos,cap,window=0,ring=False,used=None):
    used=rows if used is None else used
    q=rng.uniform(-1,1,(rows,heads*d)); k=2*rng.uniform(-1,1,(cap,kvh*d)); v=rng.uniform(-1,1,(cap,kvh*d))
    sc=1/math.sqrt(d)
    y=run(D,BN,W,SPLIT,AH,q,k,v,heads,kvh,d,cap,window,ring,pos,used,sc)
    yr=ref(q,k,v,heads,kvh,d,cap,window,ring,pos,used,sc)
    nmse=np.sum((y-yr)**2)/np.sum(yr**2)
    print(f"D={D} W={W} SPLIT={SPLIT} AH={AH} q{heads}-kv{kvh}-d{d} rows={rows} pos={pos} cap={cap} win={window} ring={ring} used={used}: nmse {nmse:.2e} nan {np.isnan(y).sum()}")
    assert nmse<1e-5 and not np.isnan(y).any(), "flash2_body emulation differs from the reference"


def main():
    case(64,64,4,1,2, 8,2,64, 40,5,64)
    case(64,64,4,2,2, 8,2,64, 40,5,64, window=20)
    case(64,64,4,2,0, 4,4,50, 70,100,256, window=70, ring=True)
    case(256,64,12,2,2, 16,4,256, 60,30,128, window=64)
    case(256,64,4,1,2, 12,1,256, 30,0,32)
    case(256,64,16,2,4, 16,1,256, 40,20,64, window=30)
    case(256,64,12,2,1, 8,2,200, 50,3,64, used=35)
    case(128,64,4,1,3, 8,2,128, 70,30,128, window=50, ring=True)
    print("all ok")


if __name__ == "__main__":
    main()
