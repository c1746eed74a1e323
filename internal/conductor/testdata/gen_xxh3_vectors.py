# Regenerates xxh3_vectors.json with Debian python3-xxhash (apt-get install python3-xxhash):
#   /usr/bin/python3 gen_xxh3_vectors.py > xxh3_vectors.json
import xxhash, struct, json
seed=1337
def local(toks): return xxhash.xxh3_64_intdigest(struct.pack('<%dI'%len(toks), *toks), seed=seed)
def roll(p,l): return xxhash.xxh3_64_intdigest(struct.pack('<QQ',p,l), seed=seed)
def seq(toks,bs):
    out=[];prev=None
    for i in range(len(toks)//bs):
        l=local(toks[i*bs:(i+1)*bs]); prev = l if prev is None else roll(prev,l); out.append(prev)
    return out
vecs=[]
for toks,bs in [([1,2,3,4],4),([101,15,100,55,89,7,8,9],4),(list(range(0,64)),16),([4294967295,0,128000,151643],2),([],4),(list(range(1000,1037)),8)]:
    vecs.append({"tokens":toks,"block_size":bs,"seq":[str(x) for x in seq(toks,bs)]})
print(json.dumps({"seed":seed,"vectors":vecs,"local_abc_seed0":str(xxhash.xxh3_64_intdigest(b'abc',seed=0))}, indent=1))
