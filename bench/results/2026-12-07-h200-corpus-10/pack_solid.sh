#!/bin/bash
# pack_solid.sh CALLDIR NAME: the libraries (*.so.xz) and cubins (cubin/*.bin.xz) of CALLDIR/NAME, an
# assembled bundle, repacked as two solid archives (and its manifest as manifest.json.xz), CALLDIR/NAME.libs.tar.xz and NAME.cubins.tar.xz,
# and its fusion reports as NAME.reports.tar.xz
# (the libraries share most of their bytes: about half the size of one .xz each). call.sh unpacks them.
set -e
call=$1; name=$2
tmp=$(mktemp -d)
mkdir -p $tmp/libs $tmp/cubins
for f in $call/$name/*.so.xz; do xz -dc $f > $tmp/libs/$(basename $f .xz); done
for f in $call/$name/cubin/*.bin.xz; do xz -dc $f > $tmp/cubins/$(basename $f .xz); done
(cd $tmp/libs && tar cf - *.so) | xz -T2 -9 -e > $call/$name.libs.tar.xz
(cd $tmp/cubins && tar cf - *.bin) | xz -T2 -9 -e > $call/$name.cubins.tar.xz
xz -9 $call/$name/manifest.json
# the fusion reports (several MiB of JSON for a whole corpus) as one archive; call.sh unpacks it
if ls $call/$name/*_report.json > /dev/null 2>&1; then
  (cd $call/$name && tar cf - *_report.json) | xz -T2 -9 > $call/$name.reports.tar.xz
  rm $call/$name/*_report.json
fi
rm -rf $tmp $call/$name/*.so.xz $call/$name/cubin
du -sh $call/$name.libs.tar.xz $call/$name.cubins.tar.xz
