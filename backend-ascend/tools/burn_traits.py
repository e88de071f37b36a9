import re,sys,glob,os
R=glob.glob(os.path.expanduser('~/.cargo/registry/src/*/burn-backend-0.21.0'))[0]+'/src/backend/'
def strip_comments(s):
    s=re.sub(r'//[^\n]*','',s)
    s=re.sub(r'/\*.*?\*/','',s,flags=re.S)
    return s
def parse(path, trait, bodies=False):
    s=strip_comments(open(path).read())
    m=re.search(r'pub trait '+trait+r'\b[^{]*\{',s)
    i=m.end(); depth=1; out=[]
    while depth>0:
        c=s[i]
        if c=='{': depth+=1; i+=1; continue
        if c=='}': depth-=1; i+=1; continue
        if depth==1 and s.startswith('fn ',i) and (s[i-1] in ' \n\t'):
            j=i; p=0;b=0
            while True:
                c=s[j]
                if c=='(':p+=1
                elif c==')':p-=1
                elif c=='[':b+=1
                elif c==']':b-=1
                elif p==0 and b==0 and c in ';{':break
                j+=1
            sig=' '.join(s[i:j].split())
            body=None
            if c=='{':
                k=j+1; d=1
                while d:
                    d+={'{':1,'}':-1}.get(s[k],0); k+=1
                body=' '.join(s[j:k].split())
            out.append((sig, c==';', body) if bodies else (sig, c==';'))
            i=j
            continue
        i+=1
    return out
if __name__=='__main__':
    files=[('ops/tensor.rs','FloatTensorOps'),('ops/int_tensor.rs','IntTensorOps'),('ops/bool_tensor.rs','BoolTensorOps'),('ops/qtensor.rs','QTensorOps'),('ops/activation.rs','ActivationOps'),('ops/transaction.rs','TransactionOps'),('base.rs','Backend')]
    for f in glob.glob(R+'ops/modules/*.rs'):
        if 'pub trait ModuleOps' in open(f).read(): files.append((f[len(R):],'ModuleOps'))
    tot=0
    for f,t in files:
        r=parse(R+f,t); req=[x for x,b in r if b]; tot+=len(req)
        print('==',t,len(req),'/',len(r))
        for x in req: print('  ',x)
    print(tot)
