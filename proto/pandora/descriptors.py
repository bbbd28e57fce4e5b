"""Writes the compiled descriptors that bt-test-interfaces ships into one FileDescriptorSet.

The .proto sources are not in the wheel; its *_pb2 modules carry each file's serialized descriptor, which is what
protoc's --descriptor_set_in reads. Dependencies come before their dependants, as protoc requires.
"""
import sys

from google.protobuf import descriptor_pb2
import pandora.host_pb2
import pandora.l2cap_pb2
import pandora.security_pb2

def main(out_path: str) -> None:
    ordered, seen = [], set()

    def visit(file_descriptor):
        if file_descriptor.name in seen:
            return
        seen.add(file_descriptor.name)
        for dependency in file_descriptor.dependencies:
            visit(dependency)
        ordered.append(file_descriptor)

    for module in (pandora.host_pb2, pandora.security_pb2, pandora.l2cap_pb2):
        visit(module.DESCRIPTOR)
    descriptor_set = descriptor_pb2.FileDescriptorSet()
    for file_descriptor in ordered:
        file_descriptor.CopyToProto(descriptor_set.file.add())
    with open(out_path, "wb") as out:
        out.write(descriptor_set.SerializeToString())
    print(" ".join(f.name for f in ordered))

if __name__ == "__main__":
    main(sys.argv[1])
