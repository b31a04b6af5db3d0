// Drives Hadoop's own SequenceFile classes for gpumr's interop tests and benchmark.
// Records travel in a plain framing: <int32 key length><UTF-8 key><int32 value length><value>.
//
//   write OUT NONE|RECORD|BLOCK CODEC_CLASS|- RECORDS       Hadoop's writer
//   read FILE OUT                                           Hadoop's Reader, whole file
//   splits FILE OUT START:LEN,...                           mapred.SequenceFileRecordReader per split;
//                                                           each split's records after an <int32 count>
//   astext FILE OUT START:LEN,...                           SequenceFileAsTextRecordReader lines, key TAB value
//   bench FILE RECORDS REPEAT                               timed write (NONE) and read inside the JVM
import java.io.*;
import java.util.*;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.*;
import org.apache.hadoop.io.compress.CompressionCodec;
import org.apache.hadoop.mapred.*;
import org.apache.hadoop.util.ReflectionUtils;

public class HadoopSeq {
  static Configuration conf() {
    Configuration c = new Configuration();
    c.set("fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem");  // no .crc side files
    c.setBoolean("fs.file.impl.disable.cache", true);
    return c;
  }

  static List<byte[][]> readFraming(String path) throws IOException {
    List<byte[][]> out = new ArrayList<>();
    try (DataInputStream in = new DataInputStream(new BufferedInputStream(new FileInputStream(path), 1 << 20))) {
      while (true) {
        int kl;
        try { kl = in.readInt(); } catch (EOFException e) { break; }
        byte[] k = new byte[kl]; in.readFully(k);
        byte[] v = new byte[in.readInt()]; in.readFully(v);
        out.add(new byte[][] {k, v});
      }
    }
    return out;
  }

  static void put(DataOutputStream out, Text k, BytesWritable v) throws IOException {
    out.writeInt(k.getLength()); out.write(k.getBytes(), 0, k.getLength());
    out.writeInt(v.getLength()); out.write(v.getBytes(), 0, v.getLength());
  }

  static SequenceFile.Writer writer(Configuration c, String file, String kind, String codec) throws Exception {
    SequenceFile.CompressionType type = SequenceFile.CompressionType.valueOf(kind);
    SequenceFile.Metadata meta = new SequenceFile.Metadata();
    meta.set(new Text("written-by"), new Text("hadoop"));
    List<SequenceFile.Writer.Option> opts = new ArrayList<>(Arrays.asList(
        SequenceFile.Writer.file(new Path(file)), SequenceFile.Writer.keyClass(Text.class),
        SequenceFile.Writer.valueClass(BytesWritable.class), SequenceFile.Writer.metadata(meta)));
    if (type == SequenceFile.CompressionType.NONE) {
      opts.add(SequenceFile.Writer.compression(type));
    } else {
      CompressionCodec cc = (CompressionCodec) ReflectionUtils.newInstance(Class.forName(codec), c);
      opts.add(SequenceFile.Writer.compression(type, cc));
    }
    return SequenceFile.createWriter(c, opts.toArray(new SequenceFile.Writer.Option[0]));
  }

  static List<long[]> parseSplits(String spec) {
    List<long[]> splits = new ArrayList<>();
    for (String s : spec.split(",")) {
      String[] p = s.split(":");
      splits.add(new long[] {Long.parseLong(p[0]), Long.parseLong(p[1])});
    }
    return splits;
  }

  public static void main(String[] a) throws Exception {
    Configuration c = conf();
    switch (a[0]) {
      case "write": {
        try (SequenceFile.Writer w = writer(c, a[1], a[2], a[3])) {
          for (byte[][] r : readFraming(a[4])) w.append(new Text(r[0]), new BytesWritable(r[1]));
        }
        break;
      }
      case "read": {
        try (SequenceFile.Reader r = new SequenceFile.Reader(c, SequenceFile.Reader.file(new Path(a[1])));
             DataOutputStream out = new DataOutputStream(new BufferedOutputStream(new FileOutputStream(a[2])))) {
          Text k = new Text(); BytesWritable v = new BytesWritable();
          while (r.next(k, v)) put(out, k, v);
        }
        break;
      }
      case "splits": {
        try (DataOutputStream out = new DataOutputStream(new BufferedOutputStream(new FileOutputStream(a[2])))) {
          for (long[] s : parseSplits(a[3])) {
            SequenceFileRecordReader<Text, BytesWritable> rr = new SequenceFileRecordReader<>(
                c, new FileSplit(new Path(a[1]), s[0], s[1], new String[0]));
            List<byte[][]> got = new ArrayList<>();
            Text k = new Text(); BytesWritable v = new BytesWritable();
            while (rr.next(k, v)) got.add(new byte[][] {k.copyBytes(), v.copyBytes()});
            rr.close();
            out.writeInt(got.size());
            for (byte[][] r : got) put(out, new Text(r[0]), new BytesWritable(r[1]));
          }
        }
        break;
      }
      case "astext": {
        try (Writer out = new OutputStreamWriter(new FileOutputStream(a[2]), "UTF-8")) {
          for (long[] s : parseSplits(a[3])) {
            SequenceFileAsTextRecordReader rr = new SequenceFileAsTextRecordReader(
                c, new FileSplit(new Path(a[1]), s[0], s[1], new String[0]));
            Text k = rr.createKey(), v = rr.createValue();
            while (rr.next(k, v)) out.write(k.toString() + "\t" + v.toString() + "\n");
            rr.close();
          }
        }
        break;
      }
      case "bench": {
        List<byte[][]> recs = readFraming(a[2]);
        int repeat = Integer.parseInt(a[3]);
        long bytes = 0;
        for (byte[][] r : recs) bytes += r[1].length;
        double wbest = 1e30, rbest = 1e30;
        for (int i = 0; i < repeat; i++) {
          long t0 = System.nanoTime();
          try (SequenceFile.Writer w = writer(c, a[1], "NONE", "-")) {
            Text k = new Text(); BytesWritable v = new BytesWritable();
            for (byte[][] r : recs) { k.set(r[0]); v.set(r[1], 0, r[1].length); w.append(k, v); }
          }
          wbest = Math.min(wbest, (System.nanoTime() - t0) / 1e9);
          t0 = System.nanoTime();
          long n = 0;
          try (SequenceFile.Reader r = new SequenceFile.Reader(c, SequenceFile.Reader.file(new Path(a[1])))) {
            Text k = new Text(); BytesWritable v = new BytesWritable();
            while (r.next(k, v)) n += v.getLength();
          }
          rbest = Math.min(rbest, (System.nanoTime() - t0) / 1e9);
          if (n != bytes) throw new IOException("read " + n + " bytes, wrote " + bytes);
        }
        System.out.println("{\"bytes\": " + bytes + ", \"write_s\": " + wbest + ", \"read_s\": " + rbest + "}");
        break;
      }
      default:
        throw new IllegalArgumentException("unknown command " + a[0]);
    }
  }
}
